"""Typed statements: checked field by field against the facts of real tool results, and rendered.

Honest statements are built from what the tools returned; each lie changes one typed field (a value
from another series, a time from another point, a swapped unit, a wrong aggregate, an invented
mechanism, a cause after its effect, a remedy typed as a next step) and must be refuted on that
field. Nothing here reads or writes prose a model wrote.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from attest.common.v1 import executor_contract_pb2
from services.executor.embedded_agent import EmbeddedExecutorAgent
from services.executor.estate import DEFAULT_ESTATE_DIR, load_estate, read_estate_description
from services.executor.tools.registry import ToolRegistry, build_default_registry
from services.executor.tools.sql_backends import build_sql_backends
from services.gatekeeper.engine import check_executor_output
from services.verifier.grounding_overlay import apply_grounding, side_text_checks
from shared.core.contracts import (
    ActionRef,
    CauseLink,
    Claim,
    ClaimCheck,
    DiagnosisContext,
    EvidenceBinding,
    ExecutorEvidenceV2,
    GatekeeperResult,
    Plan,
    Quantity,
    RecommendedAction,
    RefFacts,
    RetrievalDetails,
    Signal,
    StatedValue,
    Statement,
    StatementRef,
    TimeWindow,
    ToolInvocation,
    VerifiedEvidence,
    VerifierInput,
    VerifierOutput,
)
from shared.core.evidence_facts import facts_reader
from shared.core.failure_modes import load_failure_modes
from shared.core.grounding import check_ids
from shared.core.statement_facts import changes_state, check_statement
from shared.core.statement_render import local_time, render_statement
from shared.local_time import load_zone
from shared.proto_convert import message_to_model, plain_to_message

ANCHOR = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)
START, END = "2026-11-29T09:00:00Z", "2026-11-29T11:00:00Z"
MODES = load_failure_modes()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    """The incidents of the demo estate, and the invocations of one run over them, by id."""
    url = f"sqlite:///{tmp_path_factory.mktemp('statements') / 'estate.db'}"
    load_estate(url, DEFAULT_ESTATE_DIR, anchor=ANCHOR)
    registry: ToolRegistry = build_default_registry(build_sql_backends(url))
    invocations: dict[int, ToolInvocation] = {}

    def call(tool: str, arguments: dict) -> int:
        result = registry.invoke(tool, arguments)
        number = len(invocations) + 1
        invocations[number] = ToolInvocation(
            invocation_id=number, run_id="run-statements", tool_call_id=f"call-{number}", tool_name=tool,
            lifecycle="READY", evidence_status=result.evidence_status, request={"tool": tool, **arguments},
            agent_result=result.agent_result, retrieval_details=RetrievalDetails(evidence_refs=result.evidence_refs()),
        )
        return number

    readers: dict[int, object] = {}

    def facts(ref: StatementRef):
        invocation = invocations.get(ref.source_invocation_id)
        if invocation is None:
            return None
        reader = readers.setdefault(ref.source_invocation_id, facts_reader(invocation))
        return reader(ref.raw_path)

    return call, invocations, facts


@pytest.fixture(scope="module")
def onset(run):
    """An incident metric that rises at an onset: (invocation id, service, metric, its onset facts)."""
    call, invocations, facts = run
    for incident in read_estate_description(DEFAULT_ESTATE_DIR).incidents:
        for metric in incident.metrics:
            number = call("query_metrics", {"service": incident.service, "metric": metric.metric, "start": START, "end": END})
            found = facts(StatementRef(source_invocation_id=number, raw_path="series[0].onset"))
            if found is not None and found.level == "up":
                return number, incident.service, metric.metric, found
    pytest.fail("the demo estate has no rising incident metric")


def rise(onset, **changes) -> Statement:
    number, service, metric, found = onset
    before, after = found.values
    statement = Statement(
        subject=service, signal=Signal(kind="metric", name=metric), state="rise",
        quantities=[
            Quantity(value=round(before.value, 1), unit=before.unit, aggregate="median", precision=1),
            Quantity(value=round(after.value, 1), unit=after.unit, aggregate="median", at=after.at, precision=1),
        ],
        refs=[StatementRef(source_invocation_id=number, raw_path="series[0].onset")],
    )
    return statement.model_copy(update=changes)


def fields(statement: Statement, facts) -> set[str]:
    return {item.field for item in check_statement(statement, facts, MODES)}


# --- honest statements hold --------------------------------------------------------------------------


def test_a_rise_at_its_onset_holds_with_values_rounded_as_stated(run, onset):
    _, _, facts = run
    assert fields(rise(onset), facts) == set()
    # Stated to the minute, the onset's instant holds for the whole minute.
    statement = rise(onset)
    minute = statement.quantities[1].at[:16] + "Z"
    statement.quantities[1] = statement.quantities[1].model_copy(update={"at": minute})
    assert fields(statement, facts) == set()


def test_a_quiet_series_is_normal_and_a_rising_one_is_not(run, onset):
    call, invocations, facts = run
    number, service, metric, _ = onset
    rising = Statement(subject=service, signal=Signal(kind="metric", name=metric), state="normal",
                       refs=[StatementRef(source_invocation_id=number, raw_path="series[0].summary")])
    assert fields(rising, facts) == {"state"}
    every = call("query_metrics", {"service": service, "start": START, "end": END})
    series = json.loads(invocations[every].agent_result)["series"]
    quiet = [k for k in range(len(series))
             if facts(StatementRef(source_invocation_id=every, raw_path=f"series[{k}].onset")) is None]
    assert quiet, "some series of the service has no onset"
    normal = Statement(subject=service, signal=Signal(kind="metric", name=series[quiet[0]]["metric"]), state="normal",
                       refs=[StatementRef(source_invocation_id=every, raw_path=f"series[{quiet[0]}].summary")])
    assert fields(normal, facts) == set()


def test_an_empty_search_is_absence_and_a_found_line_is_presence(run, onset):
    call, invocations, facts = run
    _, service, _, _ = onset
    empty = call("query_logs", {"service": service, "contains": "no-such-text-anywhere", "start": START, "end": END})
    absent = Statement(subject=service, signal=Signal(kind="log", name="no-such-text-anywhere"), state="absent",
                       refs=[StatementRef(source_invocation_id=empty, raw_path="summary")])
    assert fields(absent, facts) == set()
    lines = call("query_logs", {"service": service, "start": START, "end": END})
    hit = json.loads(invocations[lines].agent_result)["hits"][0]
    ref = StatementRef(source_invocation_id=lines, raw_path="hits[0]")
    # The signature is the line's own words; its ids and numbers may be any.
    present = Statement(subject=service, signal=Signal(kind="log", name=hit["message"][:40]), state="event", refs=[ref])
    assert fields(present, facts) == set()
    assert fields(present.model_copy(update={"signal": Signal(kind="log", name="invented failure text")}), facts) == {"signal"}
    assert fields(present.model_copy(update={"state": "absent"}), facts) == {"state"}


def test_a_change_that_precedes_its_effect_is_a_cause(run, onset):
    call, invocations, facts = run
    number, service, _, found = onset
    changes = call("query_changes", {"service": service, "start": START, "end": END})
    records = json.loads(invocations[changes].agent_result)["changes"]
    before = [k for k, record in enumerate(records) if record["ts"] < found.at]
    after = [k for k, record in enumerate(records) if record["ts"] > found.at]
    assert before, "the demo incident has a change before its onset"
    change = Statement(subject=service, signal=Signal(kind="change", name=records[before[0]]["kind"]), state="event",
                       refs=[StatementRef(source_invocation_id=changes, raw_path=f"changes[{before[0]}]")])
    cause = Statement(subject=service, standing="inferred",
                      cause=CauseLink(cause=change, effect=rise(onset), mechanism=MODES.ids[0]),
                      refs=change.refs + rise(onset).refs)
    assert fields(cause, facts) == set()
    assert fields(cause.model_copy(update={"cause": cause.cause.model_copy(update={"mechanism": "invented_mechanism"})}), facts) == {"cause"}
    assert fields(cause.model_copy(update={"cause": CauseLink(cause=rise(onset), effect=rise(onset))}), facts) == {"cause"}
    if after:  # a change after the onset cannot be its cause
        late = change.model_copy(update={"refs": [StatementRef(source_invocation_id=changes, raw_path=f"changes[{after[0]}]")],
                                         "signal": Signal(kind="change", name=records[after[0]]["kind"])})
        assert fields(cause.model_copy(update={"cause": CauseLink(cause=late, effect=rise(onset))}), facts) == {"cause"}
    # Cause and effect swapped: the order is checked on the instants the refs state.
    swapped = Statement(subject=service, cause=CauseLink(cause=rise(onset), effect=change), refs=change.refs)
    assert "the cause starts after its effect" in {item.detail for item in check_statement(swapped, facts, MODES)}


# --- lies are refuted on the field they change --------------------------------------------------------


def test_a_value_from_another_series_is_refuted(run, onset):
    call, invocations, facts = run
    number, service, metric, _ = onset
    statement = rise(onset)
    wrong = statement.quantities[1].model_copy(update={"value": statement.quantities[1].value * 3 + 7})
    assert fields(statement.model_copy(update={"quantities": [statement.quantities[0], wrong]}), facts) == {"quantities"}


def test_a_time_from_another_point_is_refuted(run, onset):
    _, _, facts = run
    statement = rise(onset)
    moved = statement.quantities[1].model_copy(update={"at": "2026-11-29T09:01:00Z"})
    assert fields(statement.model_copy(update={"quantities": [statement.quantities[0], moved]}), facts) == {"quantities"}


def test_a_swapped_unit_and_a_wrong_aggregate_are_refuted(run, onset):
    _, _, facts = run
    statement = rise(onset)
    other_unit = "ms" if statement.quantities[1].unit != "ms" else "%"
    swapped = statement.quantities[1].model_copy(update={"unit": other_unit})
    assert fields(statement.model_copy(update={"quantities": [swapped]}), facts) == {"quantities"}
    maximum = statement.quantities[1].model_copy(update={"aggregate": "max"})
    assert fields(statement.model_copy(update={"quantities": [maximum]}), facts) == {"quantities"}


def test_another_service_a_fall_and_a_ref_not_in_the_run_are_refuted(run, onset):
    _, _, facts = run
    assert fields(rise(onset, subject="some-other-service"), facts) == {"subject"}
    assert fields(rise(onset, state="fall"), facts) == {"state"}
    assert fields(rise(onset, signal=Signal(kind="metric", name="invented_metric")), facts) == {"signal"}
    ghost = [StatementRef(source_invocation_id=999, raw_path="series[0].onset")]
    assert "refs" in fields(rise(onset, refs=ghost), facts)
    assert "refs" in fields(rise(onset, refs=[]), facts)
    assert fields(rise(onset, refs=[], standing="hypothesis", quantities=[]), facts) == set()


def test_whether_an_action_changes_the_system_follows_from_its_kind(run):
    _, _, facts = run
    mechanism = MODES.by_id(MODES.ids[0])
    step = Statement(action=ActionRef(mechanism=mechanism.id, kind="next_step", index=0))
    assert fields(step, facts) == set() and not changes_state(step)
    remedy = Statement(action=ActionRef(mechanism=mechanism.id, kind="remedy", index=0))
    assert fields(remedy, facts) == set() and changes_state(remedy)
    assert fields(Statement(action=ActionRef(mechanism=mechanism.id, kind="next_step", index=99)), facts) == {"action"}
    assert fields(Statement(action=ActionRef(mechanism="invented", kind="remedy", index=0)), facts) == {"action"}
    shown = render_statement(remedy, load_zone("UTC"), modes=MODES)
    assert shown == mechanism.remedies_zh[0]
    assert render_statement(step, load_zone("UTC"), modes=MODES) == mechanism.next_steps_zh[0]


# --- rendering ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("zone", "shown"), [
    ("UTC", "2026-11-29 10:02"), ("Asia/Shanghai", "2026-11-29 18:02"),
    ("America/Los_Angeles", "2026-11-29 02:02"), ("Asia/Kolkata", "2026-11-29 15:32"),
])
def test_times_are_shown_in_the_configured_zone(zone, shown):
    assert local_time("2026-11-29T10:02:00Z", load_zone(zone)) == shown
    statement = Statement(subject="svc-a", signal=Signal(kind="metric", name="queue_depth"), state="rise",
                          quantities=[Quantity(value=1234.0, unit="count", aggregate="median", at="2026-11-29T10:02:00Z")])
    assert render_statement(statement, load_zone(zone)) == f"svc-a 的 queue_depth 上升：中位数 1234（{shown}）"


def test_a_cause_renders_cause_effect_and_mechanism_with_its_standing():
    mechanism = MODES.by_id(MODES.ids[0])
    change = Statement(subject="svc-a", signal=Signal(kind="change", name="config"), state="event")
    effect = Statement(subject="svc-a", signal=Signal(kind="metric", name="err_ratio"), state="rise",
                       quantities=[Quantity(value=12.5, unit="%", aggregate="max", at="2026-11-29T10:02:30Z", precision=1)])
    text = render_statement(Statement(subject="svc-a", standing="inferred", cause=CauseLink(cause=change, effect=effect,
                                                                                             mechanism=mechanism.id)),
                            load_zone("UTC"), modes=MODES)
    assert text == f"（推断）svc-a 的 config 变更发生，导致 svc-a 的 err_ratio 上升：最高 12.5%（2026-11-29 10:02:30）（机制：{mechanism.name_zh}）"
    english = render_statement(Statement(subject="svc-a", cause=CauseLink(cause=change, effect=effect)), load_zone("UTC"), "en")
    assert english == "svc-a config change occurred, causing svc-a err_ratio rose: max 12.5% (2026-11-29 10:02:30)"


def test_statements_cross_the_wire_unchanged():
    statement = Statement(
        subject="svc-a", signal=Signal(kind="metric", name="m"), state="rise", standing="inferred",
        quantities=[Quantity(value=1.5, unit="%", aggregate="median", at="2026-11-29T10:02:00Z", precision=1)],
        refs=[StatementRef(source_invocation_id=3, raw_path="series[0].onset")],
        cause=CauseLink(cause=Statement(subject="svc-a", state="event"), effect=Statement(subject="svc-a", state="rise"),
                        mechanism="memory_oom"),
    )
    claim = Claim(claim_id="c1", claim_type="observation", claim_text="", support_level="direct", statement=statement)
    assert message_to_model(plain_to_message(claim, executor_contract_pb2.Claim), Claim) == claim
    action = RecommendedAction(text="", statement=Statement(action=ActionRef(mechanism="memory_oom", kind="remedy", index=0)))
    assert message_to_model(plain_to_message(action, executor_contract_pb2.RecommendedAction), RecommendedAction) == action


# --- the verifier's grounding reads the statement, whatever the model verifier says --------------------


T0 = "2031-05-06T07:03:00Z"
ONSET_FACTS = RefFacts(kind="metric_onset", subject="quill-indexer", metric="write_rejects_per_second", at=T0, level="up",
                       values=[StatedValue(name="before", value=0, unit="/s"),
                               StatedValue(name="after", value=4.2, unit="/s", at=T0)])
ONSET_TEXT = f"quill-indexer write_rejects_per_second onset at {T0}: rising from 0/s (median before) to 4.2/s (median after)"


def _grounded(statement: Statement) -> tuple[str, str, str]:
    """(verification, check id, model verdict) after the grounding overlay, the model verifier saying PASS."""
    text = render_statement(statement, load_zone("UTC"), modes=MODES)
    claim = Claim(claim_id="c1", claim_type="symptom", claim_text=text, support_level="direct", statement=statement,
                  evidence_bindings=[EvidenceBinding(tool_name="query_metrics", source_invocation_id=3, raw_path="series[0].onset",
                                                     evidence_excerpt="rising from 0/s")])
    inp = VerifierInput(
        diagnosis_context=DiagnosisContext(query="quill-indexer 为什么写入失败？"),
        verified_executor_output=ExecutorEvidenceV2(claims=[claim]),
        verified_evidence=[VerifiedEvidence(claim_id="c1", source_invocation_id=3, tool_name="query_metrics",
                                            raw_path="series[0].onset", matched_text=ONSET_TEXT, facts=ONSET_FACTS)],
        gatekeeper_audit=GatekeeperResult(status="pass", severity="none"), verdict_ceiling="PASS",
    )
    said = VerifierOutput(verdict="PASS", groundedness_score=1.0, rationale="model", claim_checks=[
        ClaimCheck(claim_id="c1", claim_text=text, claim_type="symptom", verification="direct_observation")])
    out = apply_grounding(inp, said)
    check = out.claim_checks[0]
    return check.verification, check.check_id, out.verdict


def _onset_statement(**changes) -> Statement:
    statement = Statement(
        subject="quill-indexer", signal=Signal(kind="metric", name="write_rejects_per_second"), state="rise",
        quantities=[Quantity(value=4.2, unit="/s", aggregate="median", at=T0, precision=1)],
        refs=[StatementRef(source_invocation_id=3, raw_path="series[0].onset")],
    )
    return statement.model_copy(update=changes)


def test_an_honest_typed_claim_stands_after_the_grounding():
    verification, check_id, _ = _grounded(_onset_statement())
    assert (verification, check_id) == ("direct_observation", "")


def test_a_typed_lie_is_refuted_and_a_fabricated_subject_rejects_the_answer():
    lie = _onset_statement(quantities=[Quantity(value=9.7, unit="/s", aggregate="median", at=T0, precision=1)])
    verification, check_id, _ = _grounded(lie)
    assert (verification, check_id) == ("contradicted", check_ids.STATEMENT_FIELD)
    verification, check_id, verdict = _grounded(_onset_statement(subject="ledger-service"))
    assert (verification, check_id, verdict) == ("contradicted", check_ids.STATEMENT_FIELD, "REJECT")


# --- the gatekeeper: a typed claim's sentence is Attest's ----------------------------------------------


def _typed_output(onset, statement: object, claim_text: str) -> dict:
    number, _, _, _ = onset
    return {
        "answer_version": "executor_evidence_v2",
        "claims": [{"claim_id": "c1", "claim_type": "symptom", "claim_text": claim_text, "support_level": "direct",
                    "statement": statement,
                    "evidence_bindings": [{"source_type": "tool", "tool_name": "query_metrics", "source_invocation_id": number,
                                           "raw_path": "series[0].onset", "evidence_excerpt": "onset at"}]}],
        "hypotheses": [], "recommended_actions": [], "missing_info": [],
    }


def test_the_gatekeeper_renders_a_typed_claims_text_and_never_passes_on_the_models(run, onset):
    _, invocations, _ = run
    statement = rise(onset)
    output = _typed_output(onset, statement.model_dump(), "服务已完全恢复，无需处理。")
    check = check_executor_output("run-statements", output, list(invocations.values()))
    claim = check.verified_executor_output.claims[0]
    assert claim.statement == statement
    assert claim.claim_text == render_statement(statement, None, modes=MODES)
    assert "恢复" not in claim.claim_text and statement.quantities[1].at[:16] in claim.claim_text  # UTC, for the display step
    # A statement that does not fit the contract drops the claim; a blank claim_text is fine with one.
    broken = _typed_output(onset, {"subject": "x", "state": "exploded"}, "")
    assert check_executor_output("run-statements", broken, list(invocations.values())).verified_executor_output.claims == []
    blank = _typed_output(onset, statement.model_dump(), "")
    assert len(check_executor_output("run-statements", blank, list(invocations.values())).verified_executor_output.claims) == 1


def test_a_typed_action_shows_the_catalogues_words_and_confirmation_follows_from_its_kind(run, onset):
    _, invocations, _ = run
    mechanism = MODES.by_id(MODES.ids[0])
    output = _typed_output(onset, rise(onset).model_dump(), "")
    output["recommended_actions"] = [
        # A destructive text typed as a read-only step: the step is shown, in the catalogue's words.
        {"text": "立即删除缓存集群全部数据并重启所有实例", "requires_human_confirmation": False,
         "statement": {"action": {"mechanism": mechanism.id, "kind": "next_step", "index": 0}}},
        # A remedy the model says needs no confirmation: it needs one.
        {"text": "", "requires_human_confirmation": False,
         "statement": {"action": {"mechanism": mechanism.id, "kind": "remedy", "index": 0}}},
        # Not a step of the catalogue: dropped.
        {"text": "重启", "statement": {"action": {"mechanism": "invented", "kind": "next_step", "index": 0}}},
    ]
    actions = check_executor_output("run-statements", output, list(invocations.values())).verified_executor_output.recommended_actions
    assert [(a.text, a.requires_human_confirmation) for a in actions] == [
        (mechanism.next_steps_zh[0], False), (mechanism.remedies_zh[0], True)]
    inp = VerifierInput(
        diagnosis_context=DiagnosisContext(query="q"), verified_executor_output=ExecutorEvidenceV2(recommended_actions=actions),
        verified_evidence=[],
        gatekeeper_audit=GatekeeperResult(status="pass", severity="none"), verdict_ceiling="PASS",
    )
    checks = side_text_checks(inp)
    assert [(c.shown, c.requires_human_confirmation) for c in checks] == [(True, False), (True, True)]


def test_a_move_reads_from_one_level_to_the_other_and_a_line_is_quoted_only_from_its_excerpt():
    levels = [Quantity(value=0.08, unit="%", aggregate="median", precision=2),
              Quantity(value=1.84, unit="%", aggregate="median", at="2026-11-29T10:02:00Z", precision=2)]
    rise_ = Statement(subject="svc-a", signal=Signal(kind="metric", name="err_ratio"), state="rise", quantities=levels)
    assert render_statement(rise_, load_zone("UTC")) == "svc-a 的 err_ratio 上升：中位数 由 0.08% 升至 1.84%（2026-11-29 10:02）"
    assert render_statement(rise_.model_copy(update={"state": "fall"}), None, "en") == (
        "svc-a err_ratio fell: median from 0.08% to 1.84% (2026-11-29T10:02:00Z)")
    # The signature is the model's words: never shown; the verified excerpt is the quote.
    line = Statement(subject="svc-a", signal=Signal(kind="log", name="words a model wrote"), state="event")
    assert render_statement(line, None) == "svc-a 的日志出现"
    assert render_statement(line, None, quote="ERROR  pool exhausted") == "svc-a 的日志出现：「ERROR pool exhausted」"


def test_a_typed_hypothesis_is_shown_in_attests_words_only_when_its_refs_state_its_fields(run, onset):
    _, invocations, _ = run
    number, service, metric, _ = onset
    output = _typed_output(onset, rise(onset).model_dump(), "")
    ref = {"source_invocation_id": number, "raw_path": "series[0].onset"}
    output["hypotheses"] = [
        {"text": "可能是 Redis 主节点故障", "related_claim_ids": ["c1"],
         "statement": {"subject": service, "signal": {"kind": "metric", "name": metric}, "state": "rise", "refs": [ref]}},
        {"text": "", "statement": {"subject": "redis-cluster-7", "signal": {"kind": "metric", "name": metric},
                                   "state": "rise", "refs": [ref]}},
        {"text": "", "statement": {"subject": "redis-cluster-7", "state": "rise", "refs": []}},  # cites nothing: dropped
    ]
    check = check_executor_output("run-statements", output, list(invocations.values()))
    hypotheses = check.verified_executor_output.hypotheses
    assert [h.text for h in hypotheses] == [f"{service} 的 {metric} 上升", f"redis-cluster-7 的 {metric} 上升"]
    assert all(h.statement.standing == "hypothesis" for h in hypotheses)
    inp = VerifierInput(
        diagnosis_context=DiagnosisContext(query="q"), verified_executor_output=check.verified_executor_output,
        verified_evidence=check.verified_evidence, gatekeeper_audit=GatekeeperResult(status="pass", severity="none"),
        verdict_ceiling="PASS",
    )
    shown = [(c.item, c.shown, c.check_id) for c in side_text_checks(inp) if c.item.startswith("hypotheses")]
    assert shown == [("hypotheses[0]", True, ""), ("hypotheses[1]", False, check_ids.STATEMENT_FIELD)]


def test_a_statement_a_model_writes_is_bounded():
    side = {"subject": "svc-a", "state": "event"}
    deep = {"subject": "svc-a", "cause": {"cause": {"subject": "svc-a", "cause": {"cause": side, "effect": side}},
                                          "effect": side}}
    many = {"subject": "svc-a", "refs": [{"source_invocation_id": 1, "raw_path": "hits[0]"}] * 21}
    for raw in (deep, many, {"subject": "x" * 201}):
        with pytest.raises(ValidationError):
            Statement.model_validate(raw)
    assert Statement.model_validate({"subject": "svc-a", "cause": {"cause": side, "effect": side}}).cause is not None


def test_the_renderer_words_file_must_hold_a_word_for_every_typed_value(tmp_path, monkeypatch):
    import json

    from shared.core import statement_render
    data = json.loads(statement_render.WORDS_FILE.read_text(encoding="utf-8"))
    del data["languages"]["zh"]["state"]["normal"]
    broken = tmp_path / "render_words.json"
    broken.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(statement_render, "WORDS_FILE", broken)
    statement_render._phrases.cache_clear()
    try:
        with pytest.raises(statement_render.RenderWordsError, match="no word for normal"):
            statement_render._phrases()
    finally:
        statement_render._phrases.cache_clear()


def test_what_a_typed_claim_is_for_the_first_line_comes_from_its_fields():
    from shared.core.templates import typed_finding_state

    def said(state: str, metric: str = "http_5xx_ratio", kind: str = "metric", **extra) -> Statement:
        return Statement.model_validate({"subject": "svc-a", "signal": {"kind": kind, "name": metric}, "state": state,
                                         **extra})

    assert typed_finding_state("symptom", said("normal")) == "normal"
    assert typed_finding_state("negative_observation", said("absent", "", "log")) == "normal"
    assert typed_finding_state("symptom", said("rise")) == "abnormal"
    assert typed_finding_state("symptom", said("fall", "cache_hit_ratio")) == "abnormal"  # a hit ratio collapsing
    assert typed_finding_state("symptom", said("fall")) is None  # errors receding answer nothing
    assert typed_finding_state("observation", said("event", "deploy", "change")) == "change"
    cause = {"cause": {"cause": said("event", "deploy", "change").model_dump(), "effect": said("rise").model_dump()}}
    assert typed_finding_state("root_cause", said("event", "", "change", standing="inferred", **cause)) == "cause"


def test_a_typed_cause_quotes_what_each_side_cites():
    from services.gatekeeper.projection import PassedBinding, _typed_text
    from services.gatekeeper.schema_rules import BindingFields

    def passed(number: int, tool: str, path: str, excerpt: str) -> PassedBinding:
        invocation = ToolInvocation(invocation_id=number, run_id="r", tool_name=tool, lifecycle="READY")
        return PassedBinding(BindingFields(tool_name=tool, evidence_excerpt=excerpt, source_invocation_id=number,
                                           raw_path=path), invocation, None)  # type: ignore[arg-type]

    change = Statement(subject="svc-a", signal=Signal(kind="change", name="deploy"), state="event",
                       refs=[StatementRef(source_invocation_id=1, raw_path="changes[0]")])
    line = Statement(subject="svc-a", signal=Signal(kind="log", name="rule engine slow"), state="event",
                     refs=[StatementRef(source_invocation_id=2, raw_path="hits[3]")])
    cause = Statement(subject="svc-a", state="event", standing="inferred", refs=change.refs + line.refs,
                      cause={"cause": change, "effect": line})
    text = _typed_text(cause, [passed(2, "query_logs", "hits[3]", "rule engine slow ruleSet=v5"),
                               passed(1, "query_changes", "changes[0]", "发布 v2.14.0 ruleSet=v5")])
    assert text == ("（推断）svc-a 的 deploy 变更发生：「发布 v2.14.0 ruleSet=v5」，导致 svc-a 的日志出现："
                    "「rule engine slow ruleSet=v5」")


# --- an episode of a series: peak, baseline, onset, end or unended last point -------------------------


def _episode(run, onset) -> tuple[Statement, dict]:
    """The honest episode of the onset fixture's series, built from the tool's projection."""
    _, invocations, _ = run
    number, service, metric, found = onset
    series = json.loads(invocations[number].agent_result)["series"][0]
    points = series["points"]
    peak = max(range(len(points)), key=lambda k: points[k][1])
    unit = found.values[0].unit

    def point(k: int, role: str) -> Quantity:
        return Quantity(value=round(points[k][1], 1), unit=unit, at=points[k][0], role=role, precision=1)

    quantities = [point(peak, "peak"), point(0, "baseline"),
                  Quantity(value=round(found.values[1].value, 1), unit=unit, aggregate="median", at=found.at,
                           role="onset", precision=1)]
    paths = [f"series[0].points[{peak}]", "series[0].points[0]", "series[0].onset"]
    if series.get("end") is None:
        quantities.append(point(len(points) - 1, "latest"))
        paths.append(f"series[0].points[{len(points) - 1}]")
    statement = Statement(subject=service, signal=Signal(kind="metric", name=metric), state="rise",
                          quantities=quantities,
                          refs=[StatementRef(source_invocation_id=number, raw_path=path) for path in dict.fromkeys(paths)])
    return statement, series


def _role(statement: Statement, role: str, **changes) -> Statement:
    return statement.model_copy(update={"quantities": [
        q.model_copy(update=changes) if q.role == role and not q.instance else q for q in statement.quantities]})


def test_an_episode_holds_and_reads_as_an_sre_would_say_it(run, onset):
    _, _, facts = run
    statement, series = _episode(run, onset)
    assert series.get("end") is None, "the fixture's move lasts to the window's end"
    assert fields(statement, facts) == set()
    text = render_statement(statement, load_zone("UTC"))
    peak, baseline, start, latest = statement.quantities
    assert text.startswith(f"{statement.subject} 的 {statement.signal.name} 在 {local_time(peak.at, load_zone('UTC'))} 达到 ")
    assert f"高于窗口前段的 {baseline.value:.1f}" in text and "起升高" in text and text.endswith("尚未恢复")
    english = render_statement(statement, load_zone("UTC"), language="en")
    assert "reached" in english and "not recovered" in english


def test_an_episode_whose_roles_the_refs_do_not_play_is_refuted(run, onset):
    _, _, facts = run
    statement, series = _episode(run, onset)
    points = series["points"]
    # The last point said where the move had not ended: a point before it is not the last.
    earlier = len(points) - 2
    lie = _role(statement, "latest", at=points[earlier][0], value=round(points[earlier][1], 1))
    lie = lie.model_copy(update={"refs": lie.refs + [StatementRef(source_invocation_id=lie.refs[0].source_invocation_id,
                                                                  raw_path=f"series[0].points[{earlier}]")]})
    assert fields(lie, facts) == {"quantities"}
    # A baseline after the peak, or on the same side of it, is no baseline.
    peak = next(q for q in statement.quantities if q.role == "peak")
    assert "quantities" in fields(_role(statement, "baseline", at=peak.at, value=peak.value), facts)
    # An onset belongs to a move: a level has none, and a fall's onset is not this rise's.
    assert "state" in fields(statement.model_copy(update={"state": "level"}), facts)
    assert "state" in fields(statement.model_copy(update={"state": "fall"}), facts)
    # The onset's instant from another point.
    assert fields(_role(statement, "onset", at=points[0][0]), facts) == {"quantities"}
    # One of each role: a second peak is refuted.
    twice = statement.model_copy(update={"quantities": statement.quantities + [statement.quantities[0]]})
    assert "quantities" in fields(twice, facts)


def test_the_embedded_executor_states_its_findings_typed_and_writes_them_from_the_statement(run):
    """Every metric and log finding the embedded executor states carries a statement its refs
    hold, and its sentence is the renderer's (the executor writes none of its own)."""
    call, invocations, facts = run
    kinds: set[tuple[str, str | None]] = set()
    for incident in read_estate_description(DEFAULT_ESTATE_DIR).incidents:
        numbers = [call(tool, {"service": incident.service, "start": START, "end": END})
                   for tool in ("query_metrics", "query_logs")]
        plan = Plan(services=[incident.service])
        output = EmbeddedExecutorAgent().derive(plan, [invocations[n] for n in numbers], f"{incident.service} 有什么异常？")
        for claim in output.claims:
            if claim.statement is None or claim.statement.signal is None:
                continue
            assert fields(claim.statement, facts) == set(), claim.claim_text
            quote = next((b.evidence_excerpt for b in claim.evidence_bindings if b.tool_name == "query_logs"), "")
            assert claim.claim_text == render_statement(claim.statement, None, quote=quote) + "。"
            kinds.add((claim.statement.signal.kind, claim.statement.state))
    assert {("metric", "rise"), ("log", "present")} <= kinds, kinds


def test_lines_are_dated_and_levelled_as_their_refs_say(run, onset):
    call, invocations, facts = run
    _, service, _, _ = onset
    number = call("query_logs", {"service": service, "start": START, "end": END})
    hits = json.loads(invocations[number].agent_result)["hits"]
    first = next(k for k, hit in enumerate(hits) if any(
        other["level"] == hit["level"] and other["ts"] > hit["ts"] for other in hits[k + 1:]))
    last = max(k for k, hit in enumerate(hits) if hit["level"] == hits[first]["level"] and hit["ts"] > hits[first]["ts"])
    refs = [StatementRef(source_invocation_id=number, raw_path=f"hits[{k}]") for k in (first, last)]
    signal = Signal(kind="log", name=hits[first]["message"], level=hits[first]["level"])
    several = Statement(subject=service, signal=signal, state="present", refs=refs,
                        span=TimeWindow(start=hits[first]["ts"], end=hits[last]["ts"]))
    # An honest model may write its own words for the line; the level must be the lines'.
    several = several.model_copy(update={"signal": signal.model_copy(update={"name": ""})})
    assert fields(several, facts) == set()
    one = Statement(subject=service, signal=signal, state="event", at=hits[first]["ts"], refs=refs[:1])
    assert fields(one, facts) == set()
    text = render_statement(several, load_zone("UTC"), quote="x")
    assert f"期间多次出现 {hits[first]['level']} 日志：「x」" in text
    # Lies: another level, another instant, a span not from the first cited line to the last.
    other_level = "INFO" if hits[first]["level"] != "INFO" else "ERROR"
    assert fields(one.model_copy(update={"signal": signal.model_copy(update={"level": other_level})}), facts) == {"level"}
    assert fields(one.model_copy(update={"at": "2026-11-29T09:00:07Z"}), facts) == {"at"}
    assert fields(several.model_copy(update={"span": TimeWindow(start=hits[first]["ts"], end=END)}), facts) == {"at"}
    assert fields(several.model_copy(update={"refs": refs[:1]}), facts) == {"at"}


def test_a_change_is_dated_and_signed_as_its_record_says(run, onset):
    call, invocations, facts = run
    _, service, _, _ = onset
    number = call("query_changes", {"service": service, "start": START, "end": END})
    record = json.loads(invocations[number].agent_result)["changes"][0]
    change = Statement(subject=service, signal=Signal(kind="change", name=record["kind"]), state="event",
                       at=record["ts"], actor=record["author"],
                       refs=[StatementRef(source_invocation_id=number, raw_path="changes[0]")])
    assert fields(change, facts) == set()
    text = render_statement(change, load_zone("UTC"), quote=record["summary"])
    assert f"{record['kind']} 变更在 " in text and f"（执行人 {record['author']}）" in text, text
    assert text.endswith(f"「{' '.join(record['summary'].split())}」"), text
    assert fields(change.model_copy(update={"actor": "someone.else"}), facts) == {"at"}
    assert fields(change.model_copy(update={"at": "2026-11-29T09:00:07Z"}), facts) == {"at"}


def test_nothing_found_is_the_cited_searchs_own_scope(run, onset):
    call, invocations, facts = run
    _, service, _, _ = onset
    number = call("query_logs", {"service": service, "contains": "no-such-text-anywhere", "level": ["ERROR", "WARN"],
                                 "start": START, "end": END})
    nothing = Statement(subject=service, signal=Signal(kind="log", name="no-such-text-anywhere", level="ERROR/WARN"),
                        state="absent", refs=[StatementRef(source_invocation_id=number, raw_path="summary")],
                        quantities=[Quantity(value=0, unit="count", aggregate="count",
                                             window=TimeWindow(start=START, end=END))])
    assert fields(nothing, facts) == set()
    text = render_statement(nothing, load_zone("UTC"))
    assert text == f"{service} 在 2026-11-29 09:00 至 2026-11-29 11:00 期间没有 包含「no-such-text-anywhere」的ERROR/WARN 日志（0 matching lines）"
    # Words or levels the search was not for are no finding of it.
    other = nothing.signal.model_copy(update={"name": "OutOfMemoryError"})
    assert fields(nothing.model_copy(update={"signal": other}), facts) == {"state"}
    fatal = nothing.signal.model_copy(update={"level": "FATAL"})
    assert fields(nothing.model_copy(update={"signal": fatal}), facts) == {"level"}
