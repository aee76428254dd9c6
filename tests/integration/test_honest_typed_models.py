"""Honest executor models that state their claims as typed statements, through the six services.

The executor's model is the scripted model of `tests/lying_model.py` (real HTTP, the real `openai`
client, real tool calls over the demo estate), answering honestly. Its typed claims cover a
point's value, a value rounded to fewer decimals, a series' min, median and max, an onset's two
levels (also stated to the minute), a quiet series, a log line, a change record, a read-only
step of the failure-mode catalogue and a typed hypothesis (a release before an onset). Each reply
is asked in Chinese and in English, of a cluster whose answers show times in UTC, Asia/Shanghai,
America/Los_Angeles and Asia/Kolkata.

Every honest reply must be released whole: verdict PASS, no rejection-ledger entry, and every typed
claim shown as confirmed in Attest's own sentence with its times in the cluster's zone.

The single-ReAct agent's model answers with typed Drafts: a why-question's strongest lead with
read-only catalogue steps, the same with rounded values, times to the minute and a quiet series, a
hedged cause (a release before an onset, put forward as a hypothesis), typed gaps (what was not
checked), a remedy the model types as needing no confirmation (released with 需人工确认, since the
kind decides), a health question answered with the anomaly found, and a yes/no question answered
yes. Each must be released unchanged
(SUCCESS, no ledger entry), every text Attest wrote from it shown with its times in the zone.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.local_time import LocalTimeDisplay
from shared.proto_convert import enum_number, spec_value
from tests.integration.conftest import start_cluster
from tests.integration.test_lying_model import _flat, _sections
from tests.lying_model import (
    MULTI_AGENT,
    QUESTION,
    SERVICE,
    SINGLE_REACT,
    TYPED_SHAPES,
    TYPED_SHAPES_MORE,
    Expectation,
    LyingModel,
    Scenario,
    _bindings,
    _point_statement,
    _quantity,
    executor_model_env,
    honest_multi_agent,
    linked_cause,
    multi_agent_typed,
    rendered,
    typed_honest_shapes,
    typed_single_react,
)
from tests.scripted_model_server import ScriptedModelServer

pytestmark = pytest.mark.integration
ZONES = ("UTC", "Asia/Shanghai", "America/Los_Angeles", "Asia/Kolkata")
QUESTIONS = {"zh": QUESTION, "en": f"Why has the CPU of {SERVICE} been so high over the last hour?"}
CONFIRMED_SECTIONS = ("结论", "依据", "已确认")
CONFIRMATION_MARK = "需人工确认"


def _rounded_peak(ev):
    """The peak point, its value rounded to a whole number."""
    statement = _point_statement(ev.peak)
    return _point_statement(ev.peak, quantities=_quantity(ev.peak, value=round(statement["quantities"][0]["value"]),
                                                          precision=0))


REPLIES = {
    "point": multi_agent_typed("symptom", lambda ev: _point_statement(ev.peak), _bindings(lambda ev: ev.peak.ref.binding()),
                               honest=True),
    "point_rounded": multi_agent_typed("symptom", _rounded_peak, _bindings(lambda ev: ev.peak.ref.binding()), honest=True),
    "shapes": typed_honest_shapes,
    "more_shapes_and_a_step": lambda ev: typed_honest_shapes(ev, TYPED_SHAPES_MORE, action=True),
    "text_claims": honest_multi_agent,
}


@pytest.fixture(scope="module", params=ZONES)
def zoned_lab(request, tmp_path_factory, otlp_receiver, new_database, auth_metadata):
    zone = request.param
    model = LyingModel()
    with ScriptedModelServer([model], repeat_last=True) as server:
        root = tmp_path_factory.mktemp("honest-typed")
        running = start_cluster(root, otlp_receiver.endpoint,
                                {**executor_model_env(server.base_url, "honest-executor"), "ATTEST_TIME_ZONE": zone},
                                database_url=new_database(root))
        engine = make_engine(running.database_url)
        try:
            yield zone, running, model, auth_metadata, RunStore(make_session_factory(engine))
        finally:
            engine.dispose()
            running.stop()


def _diagnose(running, model, metadata, scenario: Scenario) -> gateway_pb2.DiagnoseResponse:
    model.begin(scenario)
    with grpc.insecure_channel(running.gateway_addr) as channel:
        response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
            gateway_pb2.DiagnoseRequest(query=scenario.question,
                                        mode=enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, scenario.mode)),
            timeout=90, metadata=metadata)
    assert not model.errors and model.answers, f"HARNESS: the model gave no output: {model.errors}"
    return response


@pytest.mark.parametrize("language", sorted(QUESTIONS))
@pytest.mark.parametrize("reply", sorted(REPLIES))
def test_an_honest_typed_reply_is_released_whole(zoned_lab, reply: str, language: str):
    zone, running, model, metadata, runs = zoned_lab
    scenario = Scenario(f"honest_{reply}_{language}", MULTI_AGENT, REPLIES[reply], Expectation(verdict="PASS"),
                        question=QUESTIONS[language], honest=True)
    response = _diagnose(running, model, metadata, scenario)
    failures = []
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)
    if verdict != "PASS":
        failures.append(f"verdict {verdict}, not PASS")
    run = runs.get_run(response.run_id) or {}
    ledger = ((run.get("self_evaluation") or {}).get("verifier_evaluation") or {}).get("rejection_ledger")
    if ledger:
        failures.append(f"the honest reply has rejection-ledger entries: {ledger}")
    sections = _sections(response.answer)
    confirmed = _flat("".join(text for name, text in sections.items() if name in CONFIRMED_SECTIONS))
    display = LocalTimeDisplay(zone)
    typed = [claim["statement"] for claim in model.answers[0].output["claims"] if claim.get("statement")]
    for statement in typed:
        # Attest's sentence, its times in the cluster's zone (a quote of the cited line may follow).
        shown = display.localize(rendered(statement)).text
        if _flat(shown) not in confirmed:
            failures.append(f"a typed claim is not shown as confirmed in Attest's words: {shown!r}")
        for quantity in statement.get("quantities", []):
            if quantity.get("at"):  # the instant, in the zone, by the tz database rather than our code
                utc = datetime.fromisoformat(quantity["at"].replace("Z", "+00:00"))
                local = utc.astimezone(ZoneInfo(zone))
                unconverted = local.utcoffset() and _flat(f"{utc:%Y-%m-%d %H:%M}") in _flat(response.answer)
                if local.strftime("%Y-%m-%d%H:%M") not in confirmed or quantity["at"] in response.answer or unconverted:
                    failures.append(f"{quantity['at']} is not shown as {local:%Y-%m-%d %H:%M} ({zone})")
    typed_texts = {rendered(statement) for statement in typed}
    for claim in model.answers[0].true_claims:
        if claim.text in typed_texts:
            continue
        shown = display.localize(claim.text).text
        if _flat(shown.rstrip("。")) not in confirmed and not all(_flat(value) in confirmed for value in claim.values):
            failures.append(f"a true claim is not shown as confirmed: {shown!r}")
    if any(quantity.get("at") for statement in typed for quantity in statement.get("quantities", [])) and (
            zone not in sections.get("时区", "")):
        failures.append(f"the zone note does not name {zone}")
    # A typed hypothesis the verifier hid would be in the ledger (checked above); a PASS answer
    # lists no possibilities, so it is not shown here.
    if model.answers[0].output.get("recommended_actions"):
        lines = [line for line in sections.get("建议", "").splitlines() if line.startswith("- 可考虑")]
        if not lines or any(CONFIRMATION_MARK in line for line in lines):
            failures.append(f"the read-only step is not shown, or is shown as needing confirmation: {lines}")
    assert not failures, "\n".join(failures) + "\n--- answer:\n" + response.answer


# --- single-ReAct: typed Drafts --------------------------------------------------------------------------

HEALTH = {"zh": f"{SERVICE} 现在正常吗？", "en": f"Is {SERVICE} healthy right now?"}
YES_NO = {"zh": f"{SERVICE} 的 5xx 是不是升高了？", "en": f"Did the 5xx rate of {SERVICE} go up?"}
DRAFTS = {
    "why_lead_and_steps": (QUESTIONS, typed_single_react(TYPED_SHAPES, "cause_unconfirmed", conclude_on=2, actions=True)),
    "why_rounded_minutes_quiet_gaps": (QUESTIONS, typed_single_react(TYPED_SHAPES_MORE, "cause_unconfirmed", conclude_on=2,
                                                                      gaps=True)),
    # A catalogue remedy the model types as needing no confirmation: the kind decides, so it is
    # released with 需人工确认 (its text, expected above, carries the mark).
    "why_remedy_typed_read_only": (QUESTIONS, typed_single_react(TYPED_SHAPES, "cause_unconfirmed", conclude_on=2,
                                                                 remedy=True)),
    "why_hedged_cause": (QUESTIONS, typed_single_react(TYPED_SHAPES, "cause_unconfirmed", hedged_cause=True)),
    # The cause the evidence links (the release, then the line that shares its rule-set token),
    # named as an inference: released with （推断）.
    "why_cause_named": (QUESTIONS, typed_single_react(TYPED_SHAPES, "cause_named", edit=linked_cause)),
    "health_found": (HEALTH, typed_single_react(TYPED_SHAPES, "found", conclude_on=2)),
    "yes_no_yes": (YES_NO, typed_single_react(TYPED_SHAPES, "yes", conclude_on=2)),
}


@pytest.mark.parametrize("language", sorted(QUESTIONS))
@pytest.mark.parametrize("reply", sorted(DRAFTS))
def test_an_honest_typed_draft_is_released_unchanged(zoned_lab, reply: str, language: str):
    zone, running, model, metadata, runs = zoned_lab
    questions, build = DRAFTS[reply]
    scenario = Scenario(f"honest_{reply}_{language}", SINGLE_REACT, build, Expectation(), question=questions[language],
                        honest=True)
    response = _diagnose(running, model, metadata, scenario)
    failures = []
    release = spec_value(enums_pb2.ReleaseOutcome.DESCRIPTOR, response.release_outcome)
    if release != "SUCCESS":
        fallback = spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type)
        failures.append(f"release {release} ({fallback}), not SUCCESS")
    run = runs.get_run(response.run_id) or {}
    evaluation = (run.get("self_evaluation") or {}).get("verifier_evaluation") or {}
    if evaluation.get("rejection_ledger"):
        failures.append(f"the honest Draft has rejection-ledger entries: {evaluation['rejection_ledger']}")
    display = LocalTimeDisplay(zone)
    for text in model.answers[0].draft_texts:
        if _flat(display.localize(text).text) not in _flat(response.answer):
            failures.append(f"a text Attest wrote is not released unchanged (in {zone}): {text!r}")
    conclusion = model.answers[0].output["conclusion"]
    if conclusion["kind"] == "cause_named" and "（推断）" not in _sections(response.answer).get("结论", ""):
        failures.append("a named cause is not shown as an inference")
    statements = [a["statement"] for a in model.answers[0].output["analyses"]]
    for quantity in (q for statement in statements for q in statement.get("quantities", []) if q.get("at")):
        local = datetime.fromisoformat(quantity["at"].replace("Z", "+00:00")).astimezone(ZoneInfo(zone))
        if local.strftime("%Y-%m-%d%H:%M") not in _flat(response.answer):
            failures.append(f"{quantity['at']} is not shown as {local:%Y-%m-%d %H:%M} ({zone})")
    plan = [line for line in _sections(response.answer).get("行动计划", "").splitlines() if line.strip()]
    for item, line in zip(model.answers[0].output["action_plan"], plan):
        if (CONFIRMATION_MARK in line) != (item["statement"]["action"]["kind"] == "remedy"):
            failures.append(f"a catalogue action is shown with the wrong confirmation: {line!r}")
    assert not failures, "\n".join(failures) + "\n--- answer:\n" + response.answer + "\n--- audit:\n" + str(
        evaluation.get("single_react"))


@pytest.mark.parametrize("language", sorted(HEALTH))
def test_a_typed_reply_answers_a_health_question_from_its_fields(zoned_lab, language: str):
    """A typed quiet series and a typed rise, asked whether the service is healthy, answer 发现异常
    (which typed claim is normal comes from its statement's fields: tests/unit/test_statements.py)."""
    zone, running, model, metadata, runs = zoned_lab
    scenario = Scenario(f"health_{language}", MULTI_AGENT, lambda ev: typed_honest_shapes(ev, TYPED_SHAPES_MORE[2:] + (
        TYPED_SHAPES[1],)), Expectation(verdict="PASS"), question=HEALTH[language], honest=True)
    response = _diagnose(running, model, metadata, scenario)
    verdict = spec_value(enums_pb2.Verdict.DESCRIPTOR, response.effective_verdict)
    first = [line.lstrip("- ") for line in _sections(response.answer).get("结论", "").strip().splitlines()[:1]]
    assert verdict == "PASS" and first and first[0].startswith("发现异常："), response.answer
