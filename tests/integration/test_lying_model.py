"""The acceptance suite of the grounding checks: a lying executor model, through the six real services.

The executor's model is `tests/lying_model.py` served over real HTTP (the real `openai` client):
it makes real tool calls, reads the real results, and answers with true, correctly cited claims
mixed with one lie per scenario (both diagnosis modes), plus honest controls. Planner,
gatekeeper, verifier and composer are the embedded ones, as shipped. Each scenario is asked in a
fresh session of one cluster; what the user sees (`DiagnoseResponse.answer`) and what the audit
records (the run's `rejection_ledger`) are asserted.

Every acceptance criterion of a scenario is checked and the failures are reported together, one
line each, followed by the answer and the ledger. Lines starting with `HARNESS` mean the lie did
not reach the stage it targets (or the model could not build its output): a defect of this
harness, not of the checks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from attest.common.v1 import enums_pb2
from attest.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from shared.config import configured_time_zone
from shared.core.contracts import ToolInvocation
from shared.core.evidence_view import evidence_view
from shared.db.engine import make_engine, make_session_factory
from shared.db.run_store import RunStore
from shared.local_time import LocalTimeDisplay
from shared.proto_convert import enum_number, spec_value
from tests.integration.answer_structure_checks import run_invocations, structure_problems
from tests.integration.conftest import start_cluster
from tests.lying_model import (
    LIE_CLAIM_ID,
    MULTI_AGENT,
    SCENARIOS,
    SINGLE_REACT,
    LyingModel,
    ModelAnswer,
    OtherRun,
    Ref,
    Scenario,
    executor_model_env,
    honest_multi_agent,
)
from tests.scripted_model_server import ScriptedModelServer

pytestmark = pytest.mark.integration
CONFIRMED_SECTIONS = ("结论", "依据", "已确认")
SOURCES_SECTION = "已核实的数据来源"
CONFIRMATION_MARK = "需人工确认"
SIDE_SECTIONS = ("hypotheses", "recommended_actions", "missing_info")


@dataclass
class Outcome:
    scenario: Scenario
    response: gateway_pb2.DiagnoseResponse
    run: dict[str, Any]
    answers: list[ModelAnswer]  # the model's final outputs, one per executor round
    model_errors: list[str]

    @property
    def evaluation(self) -> dict[str, Any]:
        return (self.run.get("self_evaluation") or {}).get("verifier_evaluation") or {}

    @property
    def ledger(self) -> list[dict[str, Any]]:
        return list(self.evaluation.get("rejection_ledger") or [])


class Lab:
    """One cluster whose executor talks to the lying model."""

    def __init__(self, running: Any, model: LyingModel, metadata: list[tuple[str, str]]) -> None:
        self.running = running
        self.model = model
        self.metadata = metadata
        self._engine = make_engine(running.database_url)
        self.runs = RunStore(make_session_factory(self._engine))

    def close(self) -> None:
        self._engine.dispose()

    def diagnose(self, scenario: Scenario) -> Outcome:
        self.model.begin(scenario)
        mode = enum_number(enums_pb2.DiagnosisMode.DESCRIPTOR, scenario.mode)
        with grpc.insecure_channel(self.running.gateway_addr) as channel:
            # No session_id: every scenario is asked in a fresh session.
            response = gateway_pb2_grpc.GatewayServiceStub(channel).Diagnose(
                gateway_pb2.DiagnoseRequest(query=scenario.question, mode=mode), timeout=90, metadata=self.metadata)
        run = self.runs.get_run(response.run_id) or {}
        return Outcome(scenario, response, run, list(self.model.answers), list(self.model.errors))

    def record_other_run(self) -> None:
        """Ids that belong to finished runs only, read back from the run store: a query_metrics
        ref of an honest multi-agent run and a tool_call_id of an honest single-ReAct run."""
        multi = self.diagnose(_scenario("ma_honest"))
        single = self.diagnose(_scenario("sr_honest"))
        for outcome in (multi, single):
            assert not outcome.model_errors and outcome.answers, (
                f"HARNESS: the honest run for the other-run ids failed: {outcome.model_errors}")
        cited = multi.answers[0].output["claims"][0]["evidence_bindings"][0]
        invocation = next(inv for inv in multi.run["invocations"]
                          if inv["invocation_id"] == cited["source_invocation_id"])
        [ref] = [r.model_dump() for r in evidence_view(ToolInvocation.model_validate(invocation)).at(cited["raw_path"])]
        tool_call_id = next(inv["tool_call_id"] for inv in single.run["invocations"]
                            if inv["tool_name"] == "query_metrics")
        self.model.other_run = OtherRun(
            run_id=multi.run["run_id"],
            invocation=Ref(invocation["tool_name"], invocation["invocation_id"], invocation["tool_call_id"],
                           ref["raw_path"], ref["text"]),
            tool_call_id=tool_call_id,
        )


def _scenario(scenario_id: str) -> Scenario:
    return next(s for s in SCENARIOS if s.id == scenario_id)


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database, auth_metadata):
    model = LyingModel()
    with ScriptedModelServer([model], repeat_last=True) as server:
        root = tmp_path_factory.mktemp("lying")
        running = start_cluster(root, otlp_receiver.endpoint, executor_model_env(server.base_url, "lying-executor"),
                                database_url=new_database(root))
        lab = Lab(running, model, auth_metadata)
        try:
            lab.record_other_run()
            yield lab
        finally:
            lab.close()
            running.stop()


# --- reading the answer ----------------------------------------------------------------------------


def _shown(text: str) -> str:
    """A model's text as the answer would show it: its UTC times in the configured zone.
    The checks ran on the UTC text; the user reads the localized one."""
    return LocalTimeDisplay(configured_time_zone()).localize(text).text


def _flat(text: str) -> str:
    """Whitespace removed: the comparison is insensitive to how a renderer spaces the text."""
    return "".join(text.split())


def _sentence(text: str) -> str:
    return text.rstrip("。．.；;!！ ")


def _occurs(token: str, text: str) -> bool:
    """A token in a text; a number only where no digit or decimal point precedes it (so that
    `2.4%` is not found inside `12.4%`)."""
    token, text = _flat(token), _flat(text)
    if token[:1].isdigit():
        return re.search(rf"(?<![0-9.]){re.escape(token)}", text) is not None
    return token in text


def _sections(answer: str) -> dict[str, str]:
    parts = re.split(r"【([^】]+)】", answer)
    sections: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        sections[name] = sections.get(name, "") + body
    return sections


def _verdict(value: int) -> str | None:
    return spec_value(enums_pb2.Verdict.DESCRIPTOR, value)


def _fallback(response: gateway_pb2.DiagnoseResponse) -> str | None:
    return spec_value(enums_pb2.FallbackType.DESCRIPTOR, response.fallback_type)


def _release(response: gateway_pb2.DiagnoseResponse) -> str | None:
    return spec_value(enums_pb2.ReleaseOutcome.DESCRIPTOR, response.release_outcome)


def _nodes(run: dict[str, Any]) -> set[str]:
    return {event["node"] for event in run.get("events", [])}


def _without_citations(answer: str) -> str:
    """The answer with its citations reduced to their tools (invocation ids and paths differ
    between two runs of the same output), without 【检查范围】 (each run's own tool calls: ids and
    windows)."""
    answer = re.sub(r"【检查范围】\n(?:- [^\n]*\n?)*", "", answer)
    return re.sub(r"#\d+ [^；\]]*", "#…", answer)


# --- the acceptance criteria -------------------------------------------------------------------------


def _lies_absent(outcome: Outcome) -> list[str]:
    """The lie's sentences, and each token it states that no true claim states, appear nowhere."""
    failures = []
    answer = outcome.response.answer
    truths = [_shown(claim.text) for answer_ in outcome.answers for claim in answer_.true_claims]
    for model_answer in outcome.answers:  # every round's output (a retry round may lie about other refs)
        for sentence in model_answer.lie_sentences:
            if _flat(_sentence(_shown(sentence))) in _flat(answer):
                failures.append(f"the lie is shown: {sentence!r}")
        for token in model_answer.lie_tokens:
            if not any(_occurs(_shown(token), truth) for truth in truths) and _occurs(_shown(token), answer):
                failures.append(f"a token only the lie states is shown: {token!r}")
    return list(dict.fromkeys(failures))  # a retry round repeats the same lie


def _ledger_names(outcome: Outcome) -> list[str]:
    """The ledger names the expected check, for the lying item."""
    expect = outcome.scenario.expect
    named = [e for e in outcome.ledger if expect.check in (e.get("check"), e.get("rule"))]
    if not named:
        return [f"the rejection ledger has no entry with check {expect.check!r}"]
    items = set(expect.item)
    # After an evidence retry the ledger names claims per round (`r0.c4`: round 0's c4).
    def names(entry: dict) -> set:
        raw = {entry.get("item"), entry.get("claim_id"), entry.get("analysis_id")}
        return raw | {re.sub(r"^r\d+\.", "", n) for n in raw if isinstance(n, str)}

    if items and not any(names(e) & items for e in named):
        return [f"the ledger's {expect.check!r} entries name another item than {sorted(items)}: "
                f"{[(e.get('item'), e.get('claim_id')) for e in named]}"]
    return []


def _multi_agent_reach(outcome: Outcome) -> list[str]:
    """HARNESS: the output is a legal contract whose true claims pass the gatekeeper and whose lie
    reaches the stage it targets."""
    failures = []
    evaluation, expect = outcome.evaluation, outcome.scenario.expect
    if evaluation.get("executor_output_parse_status") != "valid":
        return [f"HARNESS: the executor output is not a valid contract "
                f"({evaluation.get('executor_output_parse_status')}): the gatekeeper never saw it"]
    checked = (evaluation.get("gatekeeper_result") or {}).get("checked_bindings") or []
    for claim in outcome.answers[0].output["claims"]:
        outcomes = [b["outcome"] for b in checked if b["claim_id"] == claim["claim_id"]]
        is_lie = claim["claim_id"] == LIE_CLAIM_ID
        if is_lie and expect.stage == "gatekeeper":
            continue
        if not outcomes or any(o not in ("passed", "backfilled") for o in outcomes):
            failures.append(f"HARNESS: claim {claim['claim_id']} does not pass the gatekeeper: {outcomes}")
    if expect.stage == "verifier":
        if evaluation.get("verdict_ceiling") != "PASS":
            failures.append(f"HARNESS: verdict ceiling {evaluation.get('verdict_ceiling')}, not PASS")
        if "verifier" not in _nodes(outcome.run):
            failures.append("HARNESS: the verifier never ran")
        section = next((s for s in SIDE_SECTIONS if any(i.startswith(s) for i in expect.item)), None)
        if section:
            kept = [item.get("text") for item in (evaluation.get("verified_executor_output") or {}).get(section, [])]
            lie = outcome.answers[0].lie_sentences[0]
            if lie not in kept:
                failures.append(f"HARNESS: the gatekeeper dropped the {section} item before the verifier: {kept}")
    return failures


def _multi_agent_criteria(outcome: Outcome) -> list[str]:
    scenario, response, expect = outcome.scenario, outcome.response, outcome.scenario.expect
    failures = _multi_agent_reach(outcome)
    verdict, fallback = _verdict(response.effective_verdict), _fallback(response)
    if expect.fallback:
        if (fallback, verdict) != (expect.fallback, None):
            failures.append(f"expected fallback {expect.fallback} without a verdict, got fallback {fallback}, "
                            f"verdict {verdict}")
    elif verdict != expect.verdict or fallback is not None:
        failures.append(f"expected effective verdict {expect.verdict}, got {verdict} (fallback {fallback})")
    if expect.verdict in ("PASS", "LOW_CONFID"):
        confirmed = "".join(text for name, text in _sections(response.answer).items() if name in CONFIRMED_SECTIONS)
        for claim in outcome.answers[0].true_claims:
            if _flat(_sentence(_shown(claim.text))) not in _flat(confirmed) and not all(
                    _occurs(_shown(value), confirmed) for value in claim.values):
                failures.append(f"a true claim is not shown as confirmed: {claim.text!r}")
    if scenario.honest:
        if outcome.ledger:
            failures.append(f"the honest output has rejection-ledger entries: {outcome.ledger}")
    elif scenario.needs_confirmation:
        action = _flat(_shown(outcome.answers[0].lie_sentences[0]))
        lines = [line for line in response.answer.splitlines() if action in _flat(line)]
        for line in lines:
            if CONFIRMATION_MARK not in line:
                failures.append(f"the state-changing action is shown without {CONFIRMATION_MARK}: {line.strip()!r}")
        if scenario.action_shown and not lines:
            failures.append("the action is not shown")
    elif expect.check:
        failures += _lies_absent(outcome)
    if expect.check:
        failures += _ledger_names(outcome)
    if expect.check == "evidence.invocation_ref":
        gatekeeper = outcome.evaluation.get("gatekeeper_result") or {}
        said = [e.get("detail", "") for e in outcome.ledger if expect.check in (e.get("check"), e.get("rule"))]
        said += list(gatekeeper.get("errors") or [])
        if not any("another run" in text for text in said):
            failures.append(f"neither the ledger nor gatekeeper_result says 'another run': {said}")
    return failures


def _unknown_field_criteria(lab: Lab, outcome: Outcome) -> list[str]:
    """Fields outside the contract change nothing the user sees, and the gatekeeper says so: its
    warnings name each by position, its persisted executor values keep the name (escaped)."""
    failures = []
    result = outcome.evaluation.get("gatekeeper_result") or {}
    warned = [w for w in result.get("warnings") or [] if w.endswith(": unknown field ignored")]
    recorded = [v.get("value") for v in result.get("executor_values") or []]
    if len(warned) < len(outcome.scenario.unknown_fields):
        failures.append(f"gatekeeper_result.warnings do not name every unknown field: {warned!r}")
    for name in outcome.scenario.unknown_fields:
        if repr(name) not in recorded:
            failures.append(f"gatekeeper_result.executor_values do not record the unknown field {name!r}: {recorded!r}")
    twin = lab.diagnose(_twin(outcome.scenario))
    if twin.model_errors:
        failures.append(f"HARNESS: the twin run without unknown fields failed: {twin.model_errors}")
    elif _without_citations(outcome.response.answer) != _without_citations(twin.response.answer):
        failures.append("the answer differs from the same output without the unknown fields:\n"
                        f"--- without them:\n{twin.response.answer}")
    return failures


def _twin(scenario: Scenario) -> Scenario:
    return Scenario(f"{scenario.id}_twin", scenario.mode, honest_multi_agent, scenario.expect)


def _single_react_criteria(outcome: Outcome) -> list[str]:
    scenario, response, expect = outcome.scenario, outcome.response, outcome.scenario.expect
    failures = []
    react = outcome.evaluation.get("single_react") or {}
    if react.get("stop_reason"):
        failures.append(f"HARNESS: the agent stopped without a Draft: {react.get('stop_reason')}")
    guard = react.get("guard") or {}
    if expect.stage in ("semantic_guard", "") and not guard.get("passed"):
        failures.append(f"HARNESS: the Draft fails EvidenceGuard: {guard.get('violations')}")
    if expect.stage == "semantic_guard" and "semantic_guard" not in react:
        failures.append("HARNESS: SemanticGuard never reviewed the Draft")
    if expect.stage == "evidence_guard" and not guard:
        failures.append("HARNESS: EvidenceGuard never checked the Draft")
    release, fallback = _release(response), _fallback(response)
    expected = ("FALLBACK", expect.fallback) if expect.fallback else ("SUCCESS", None)
    if (release, fallback) != expected:
        failures.append(f"expected release {expected}, got {(release, fallback)}")
    answer = outcome.answers[0]
    if scenario.honest:
        for text in answer.draft_texts:
            if _flat(_shown(text)) not in _flat(response.answer):
                failures.append(f"the supported Draft is not released unchanged: missing {text!r}")
        if outcome.ledger:
            failures.append(f"the honest Draft has rejection-ledger entries: {outcome.ledger}")
        return failures
    failures += _lies_absent(outcome)
    shown = [text for text in answer.draft_texts if _flat(_sentence(text)) in _flat(response.answer)]
    if shown:
        failures.append(f"the answer shows {len(shown)} of the Draft's {len(answer.draft_texts)} texts, "
                        f"e.g. {shown[0]!r}")
    sources = _sections(response.answer).get(SOURCES_SECTION, "")
    for line in filter(None, (line.strip() for line in sources.splitlines())):
        tool = re.match(r"- (\w+)", line)
        if not tool or tool.group(1) not in answer.cited_tools:
            failures.append(f"a listed source is not one of the Draft's verified sources: {line!r}")
    failures += _ledger_names(outcome)
    return failures


def _report(outcome: Outcome, failures: list[str]) -> str:
    lines = [f"{outcome.scenario.id}: {len(failures)} acceptance criteria failed"]
    lines += [f"  - {failure}" for failure in failures]
    lines += ["--- answer:", outcome.response.answer, "--- rejection ledger:",
              json.dumps(outcome.ledger, ensure_ascii=False, indent=None)]
    checks = outcome.evaluation.get("claim_checks") or []
    if checks:
        lines += ["--- claim checks:"] + [
            f"{c.get('claim_id')}: {c.get('verification')} {c.get('check_id') or ''} {c.get('detail', '')[:120]}"
            for c in checks]
    react = outcome.evaluation.get("single_react")
    if react:
        lines += ["--- single_react audit:", json.dumps(react, ensure_ascii=False)]
    return "\n".join(lines)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_lying_model_scenario(lab, scenario: Scenario):
    outcome = lab.diagnose(scenario)
    if outcome.model_errors or not outcome.answers:
        pytest.fail(_report(outcome, [f"HARNESS: the lying model gave no output: {outcome.model_errors}"]))
    if scenario.mode == MULTI_AGENT:
        failures = _multi_agent_criteria(outcome)
        if scenario.unknown_fields:
            failures += _unknown_field_criteria(lab, outcome)
    else:
        assert scenario.mode == SINGLE_REACT
        failures = _single_react_criteria(outcome)
    # Nothing unverified in the structured answer either: its text is the answer's, its
    # citations are this run's calls with their stored evidence.
    failures += structure_problems(outcome.response, run_invocations(lab.running.database_url, outcome.response.run_id))
    if failures:
        pytest.fail(_report(outcome, failures), pytrace=False)
