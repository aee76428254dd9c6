"""One test per `#### Scenario:` of the graph spec (`../shared/specs/chat-verifier-agent.graph.md`),
named after it: `test_<scenario title in snake_case>`, in a class named after its requirement.
A test named `test_<scenario>__<aspect>` checks one more aspect of the same scenario.

Everything runs against the real graph and store: the six real processes of one cluster
(`graph_spec_lab.py`: scripted executor and verifier models over real HTTP, embedded planner,
gatekeeper and composer), a SQLite audit store read back through `RunStore` / `InvocationStore`.
Diagnoses that several tests read run once per module (`lab.once`). Verdicts, routes, fallback
types, persisted fields and audit contents are asserted, not the answer's wording.

`test_every_spec_scenario_has_a_test` keeps the mapping complete: the scenario titles are embedded
below (from the spec file) and compared with the spec file when it is present.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from typing import Any

import pytest
from sqlalchemy import select, update

from attest.common.v1 import enums_pb2
from attest.gatekeeper.v1 import gatekeeper_pb2, gatekeeper_pb2_grpc
from gateway.launcher import REPO_ROOT
from services.executor.trace_summary import (
    MAX_ENTRY_OUTPUT_BYTES,
    MAX_TOTAL_BYTES,
    build_tool_trace_summary,
)
from services.verifier.prompts import VERIFIER_PROMPT
from services.verifier.prompts import load_prompt as load_verifier_prompt
from shared.core.contracts import VERIFICATIONS, GatekeeperResult
from shared.db.models import RunRow, ToolInvocationRow
from shared.proto_convert import message_to_model, spec_value
from tests.integration.graph_spec_lab import (
    SERVICE,
    Answer,
    Lab,
    Observations,
    Outcome,
    binding,
    claim,
    contract,
    embedded_reply,
    error_log_ref,
    first_ref,
    metric_peak,
    open_lab,
    stored_refs,
)

pytestmark = pytest.mark.integration

# --- the spec's scenarios -------------------------------------------------------------------------

SPEC_FILE = REPO_ROOT.parent / "shared" / "specs" / "chat-verifier-agent.graph.md"
# Copied from SPEC_FILE's `### Requirement:` / `#### Scenario:` headings (2026-12-01). The spec
# lives outside this repository; when it is present, `test_embedded_scenarios_match_the_spec_file`
# fails on any difference, so a new scenario is added here (and gets its test) or the build breaks.
SPEC_SCENARIOS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Verifier SHALL fact-check Executor answers", (
        "PASS verdict when all claims have evidence",
        "LOW_CONFID verdict with partial evidence",
        "LOW_CONFID verdict with only inference support",
        "REJECT verdict when claims contradict evidence",
        "Verified structured claims are the only verification target",
        "Executor output is invalid",
    )),
    ("Verifier SHALL output structured JSON", (
        "claim-level verifier output is accepted",
        "Output format validation",
        "strict schema output",
    )),
    ("facts_checked SHALL use a fixed classification set", (
        "claim checks are mapped to legacy facts",
    )),
    ("groundedness_score SHALL be derived from fact classifications", (
        "contradicted fact forces reject",
        "score derived from supported facts",
    )),
    ("ChatService SHALL route based on Verifier verdict", (
        "PASS routes to Composer",
        "LOW_CONFID does not qualify for evidence retry",
        "LOW_CONFID qualifies for evidence retry",
        "REJECT does not enter retry round",
        "REJECT produces bounded output",
        "Verifier execution fails",
    )),
    ("Verifier SHALL be observable", (
        "claim checks written to self_evaluation",
        "composer output written to self_evaluation",
        "verdict written to self_evaluation",
        "pre-verification fallback is persisted",
        "gatekeeper result written to self_evaluation",
        "prompt audit written to verifier evaluation",
        "prompt audit available on fallback paths",
        "evaluation payload is inspected",
    )),
    ("self_evaluation SHALL be a container object", (
        "rule evaluation stored separately",
        "verifier evaluation stored separately",
        "no whole-object overwrite after initialization",
    )),
    ("Verifier SHALL consume explicit verification inputs", (
        "explicit input blocks available to Verifier",
        "Verifier remains isolated from intermediate and raw material",
        "only passed bindings are available",
        "verified evidence preserves precise references",
        "gatekeeper audit and ceiling are available",
        "technical retry occurs",
    )),
    ("Verifier facts SHALL be auditable", (
        "claim checks contain evidence refs",
        "verifier evaluation persists traceability snapshot",
    )),
    ("Verifier inputs SHALL tolerate hardened no-evidence semantics", (
        "Failed evidence remains a verifier-visible gap",
        "Deduped retrievals do not count as fresh support",
    )),
    ("Verifier evidence summaries SHALL preserve concrete supporting facts", (
        "Log evidence contains a concrete matching message",
        "Metrics evidence contains concrete alert fields",
        "Summary remains bounded",
    )),
    ("Verifier low-confidence output SHALL not present unsupported claims as confirmed", (
        "LOW_CONFID with critical evidence gaps",
    )),
    ("Executor SHALL output an evidence-attribution contract", (
        "Executor V2 final output contains only structured diagnostic fields",
        "Confirmed claims carry evidence bindings",
        "Evidence bindings support multiple tool types",
        "Unsupported conclusions are not confirmed claims",
        "Runbook and skill guidance do not become incident facts",
    )),
    ("User-facing Chat answers SHALL remain readable Chinese", (
        "V2 machine contract is not exposed as normal user answer",
        "Machine contract remains available for trace inspection",
    )),
    ("Structured Executor output SHALL degrade safely", (
        "Malformed Executor JSON is classified",
        "Structured parse failure remains observable",
    )),
    ("Executor Gatekeeper SHALL validate deterministic structured-output failures", (
        "schema rule rejects removed fields",
        "schema rule rejects missing evidence bindings",
        "invocation rule rejects fabricated invocation ids",
        "invocation rule rejects tool name mismatch",
        "valid structured output passes initial gatekeeper rules",
        "gatekeeper reject bypasses Verifier",
        "gatekeeper low confidence is bounded",
    )),
    ("Verifier claim checks SHALL use a fixed derivability classification set", (
        "claim check verification values are constrained",
        "claim check evidence references remain auditable",
    )),
    ("User-facing verifier outputs SHALL follow Composer-safe protocols", (
        "PASS uses Composer-safe output",
        "LOW_CONFID uses Composer-safe uncertainty output",
        "REJECT uses degraded template",
    )),
    ("Executor evidence bindings SHALL support precise evidence references", (
        "Precise evidence binding contains invocation path and excerpt",
        "Legacy plural invocation ids remain compatibility only",
    )),
    ("Gatekeeper SHALL validate evidence reference fidelity", (
        "Valid precise binding passes",
        "Missing raw path is low confidence",
        "Old invocation without evidence refs is low confidence",
        "Unknown raw path is rejected",
        "Mismatched excerpt is rejected",
    )),
    ("Verifier SHALL use verified claim-local evidence for derivability", (
        "Verified excerpt supports direct observation",
        "Verified evidence is complete Verifier context",
    )),
    ("Gatekeeper severity SHALL constrain effective verdict", (
        "Reject severity bypasses Verifier",
        "Low confidence severity prevents PASS",
        "Gatekeeper audit includes severity",
    )),
    ("Verifier input hook SHALL only perform narrow compatibility backfill", (
        "Unique invocation candidate may be backfilled",
        "Raw path is never backfilled",
    )),
    ("Executor prompt SHALL constrain narrow-scope over-expansion", (
        "Narrow scope produces minimal observation claims",
    )),
    ("Gatekeeper SHALL expose rule catalog metadata in audit output", (
        "Gatekeeper pass includes rule metadata",
        "Gatekeeper fail includes rule metadata",
        "Gatekeeper fallback pass includes rule metadata",
    )),
    ("Gatekeeper rule catalog SHALL remain deterministic", (
        "Rule metadata is lightweight",
    )),
)


def scenario_test_name(title: str) -> str:
    return "test_" + re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")


def read_spec_scenarios(text: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    found: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        if line.startswith("### Requirement:"):
            found.append((line.removeprefix("### Requirement:").strip(), []))
        elif line.startswith("#### Scenario:"):
            found[-1][1].append(line.removeprefix("#### Scenario:").strip())
    return tuple((requirement, tuple(titles)) for requirement, titles in found)


def test_every_spec_scenario_has_a_test():
    """Each scenario (from the spec file when present, else the embedded list) has its test."""
    scenarios = read_spec_scenarios(SPEC_FILE.read_text(encoding="utf-8")) if SPEC_FILE.exists() else SPEC_SCENARIOS
    defined = {name for cls in globals().values() if isinstance(cls, type) and cls.__name__.startswith("Test")
               for name in vars(cls) if name.startswith("test_")}
    missing = [title for _, titles in scenarios for title in titles if scenario_test_name(title) not in defined]
    assert not missing, f"spec scenarios without a test named after them: {missing}"
    titles = [title for _, group in scenarios for title in group]
    assert len({scenario_test_name(t) for t in titles}) == len(titles), "two scenarios map to one test name"
    extra = {name.split("__")[0] for name in defined} - {scenario_test_name(t) for t in titles}
    assert not extra, f"tests named after no spec scenario: {sorted(extra)}"


def test_embedded_scenarios_match_the_spec_file():
    """The embedded list is the spec's; without the spec file (a clone without ../shared) the
    embedded list stands, and the check above still runs on it."""
    if not SPEC_FILE.exists():
        assert sum(len(titles) for _, titles in SPEC_SCENARIOS) == 83, "the embedded list was edited by hand"
        return
    assert read_spec_scenarios(SPEC_FILE.read_text(encoding="utf-8")) == SPEC_SCENARIOS


# --- the lab --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory, otlp_receiver, new_database, auth_metadata):
    root = tmp_path_factory.mktemp("graph-spec")
    with open_lab(root, otlp_receiver.endpoint, new_database(root), auth_metadata) as lab:
        yield lab


def _refused_url() -> str:
    """A loopback URL nothing listens on (the port is bound, released, and left closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def refused_logs_lab(tmp_path_factory, otlp_receiver, new_database, auth_metadata):
    """A second lab whose logs backend (Loki) refuses every connection: a real backend failure."""
    root = tmp_path_factory.mktemp("graph-spec-refused-logs")
    with open_lab(root, otlp_receiver.endpoint, new_database(root), auth_metadata, {
        "ATTEST_LOKI_URL": _refused_url(),
        "ATTEST_DEMO_TOOLS": "query_metrics,query_changes,lookup_knowledge",
    }) as lab:
        yield lab


# --- what the scripted executor answers ----------------------------------------------------------

GAP_DETAIL = "集中在结算线程池"
FABRICATED_ENTITY = "redis-cluster-7"
REMOVED_FIELD_MARK = "UFA-7731"
FOREIGN_INVOCATION = 987654321


def _value(ref: dict[str, str]) -> str:
    return re.search(r"=(-?[\d.]+)", ref["text"]).group(1)


def metric_low(observations: Observations) -> tuple[dict[str, Any], dict[str, str]]:
    observation, peak = metric_peak(observations)
    points = [r for r in observation["evidence_refs"] if re.search(r"\.points\[\d+\]$", r["raw_path"])
              and _value(r) != _value(peak)]
    assert points, "HARNESS: the series has one value only"
    return observation, min(points, key=lambda r: float(_value(r)))


def faithful(obs: Observations) -> str:
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)))


def fact_and_gap(obs: Observations) -> str:
    """c1 observed; c2 adds a detail the evidence lacks (a non-key detail: an evidence gap)."""
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)),
                    claim("c2", f"监控显示 {r['text']}，{GAP_DETAIL}", binding(o, r)))


def another_fact(obs: Observations) -> str:
    """A retry round's answer: a different verified fact, which does not address round 0's gap."""
    try:
        o, r = error_log_ref(obs)
        text = f"日志显示 {r['text'].removesuffix('…')}"
    except AssertionError:
        o, r = metric_low(obs)
        text = f"监控显示 {r['text']}"
    return contract(claim("c1", text, binding(o, r), claim_type="observation"))


def changed_number(obs: Observations) -> str:
    o, r = metric_peak(obs)
    return contract(claim("c1", r["text"].replace(_value(r), "3.5"), binding(o, r)))


def fabricated_entity(obs: Observations) -> str:
    o, r = metric_peak(obs)
    return contract(claim("c1", f"{r['text']}，由 {FABRICATED_ENTITY} 的故障引起", binding(o, r)))


def prose(obs: Observations) -> str:
    return "payment-service 的 CPU 很高，可能是流量上涨导致的。"


def malformed(obs: Observations) -> str:
    return json.dumps({"status": "ok", "claims": "流量上涨导致 CPU 升高"}, ensure_ascii=False)


def foreign_invocation(obs: Observations) -> str:
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(
        o, r, source_invocation_id=FOREIGN_INVOCATION, source_invocation_ids=[FOREIGN_INVOCATION])))


def fact_and_imprecise(obs: Observations) -> str:
    """c1 precise; c2 cites the right invocation by the legacy plural ids only, without raw_path."""
    o, r = metric_peak(obs)
    _, low = metric_low(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)),
                    claim("c2", f"监控显示 {low['text']}", binding(o, low, source_invocation_id=None, raw_path=None)))


def fact_with_removed_fields(obs: Observations) -> str:
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)),
                    user_facing_answer=f"{REMOVED_FIELD_MARK} 根因是数据库连接池耗尽，请立即重启",
                    diagnosis_summary=f"{REMOVED_FIELD_MARK} summary")


def fact_and_malformed_claims(obs: Observations) -> str:
    """c2 has no evidence bindings; c3 an unknown support_level."""
    o, r = metric_peak(obs)
    _, low = metric_low(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)),
                    claim("c2", "payment-service 出现 OOM"),
                    claim("c3", f"监控显示 {low['text']}", binding(o, low), support_level="strong"))


def fact_without_missing_info(obs: Observations) -> str:
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)), missing_info=None)


def four_tools(obs: Observations) -> str:
    """One claim per evidence tool that returned refs (metrics, logs, changes; knowledge as context)."""
    claims = []
    o, r = metric_peak(obs)
    claims.append(claim("c1", f"监控显示 {r['text']}", binding(o, r)))
    o, r = error_log_ref(obs)
    claims.append(claim("c2", f"日志显示 {r['text'].removesuffix('…')}", binding(o, r), claim_type="observation"))
    changes = [x for x in obs.of("query_changes") if x.get("evidence_refs")]
    if changes:
        ref = changes[0]["evidence_refs"][0]
        claims.append(claim("c3", f"变更记录：{ref['text'].removesuffix('…')}", binding(changes[0], ref),
                            claim_type="observation"))
    o, r = first_ref(obs, "lookup_knowledge")
    claims.append(claim("c4", f"知识库记载：{r['text'].removesuffix('…')[:200]}",
                        binding(o, r, evidence_excerpt=r["text"].removesuffix("…")[:200]), claim_type="context"))
    return contract(*claims)


def unlinked_root_cause(obs: Observations) -> str:
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)),
                    claim("c2", "payment-service 的 CPU 升高是由流量上涨导致的", binding(o, r), claim_type="root_cause"))


def runbook_as_incident_fact(obs: Observations) -> str:
    """The runbook's guidance stated as this incident's cause, citing only the runbook."""
    o, r = metric_peak(obs)
    k, chunk = first_ref(obs, "lookup_knowledge")
    excerpt = chunk["text"].removesuffix("…")[:80]
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r)),
                    claim("c2", f"本次 payment-service CPU 升高的根因是：{excerpt}",
                          binding(k, chunk, evidence_excerpt=excerpt), claim_type="root_cause"),
                    recommended_actions=[{"text": "按运行手册检查 payment-service 的线程池配置",
                                          "requires_human_confirmation": True}])


def risk_only(obs: Observations) -> str:
    """One critical claim the verifier can only infer (a risk is a forecast, not an observation)."""
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}", binding(o, r), claim_type="risk"))


def backfill_candidate(obs: Observations) -> str:
    """The binding names no invocation id; exactly one query_metrics invocation exists."""
    o, r = metric_peak(obs)
    return contract(claim("c1", f"监控显示 {r['text']}",
                          binding(o, r, source_invocation_id=None, source_invocation_ids=None)))


def backfill_spelled(spelling: str) -> Answer:
    """`backfill_candidate` with "no invocation id" spelled as `spelling` (see `NO_ID_SPELLINGS`)."""
    def answer(obs: Observations) -> str:
        o, r = metric_peak(obs)
        item = binding(o, r, source_invocation_id=None, source_invocation_ids=None)
        item.update(NO_ID_SPELLINGS[spelling])
        return contract(claim("c1", f"监控显示 {r['text']}", item))
    return answer


# DESIGN §3 ruling "Compatibility backfill": each spelling of "no invocation id" has one outcome.
NO_ID_SPELLINGS: dict[str, dict[str, Any]] = {
    "absent": {},
    "null": {"source_invocation_id": None, "source_invocation_ids": None},
    "empty list": {"source_invocation_ids": []},
    "null and empty list": {"source_invocation_id": None, "source_invocation_ids": []},
}


def with_metrics(suggested):
    """The planned calls, plus a query_metrics call over the same scope when none was planned."""
    if any(name == "query_metrics" for name, _ in suggested):
        return suggested
    scope = next(args for _, args in suggested)
    return [*suggested, ("query_metrics", {key: scope[key] for key in ("service", "start", "end") if key in scope}
                         | {"step_seconds": 60})]


def metrics_twice(suggested):
    """The planned calls and the planned query_metrics call once more: two backfill candidates."""
    return [*suggested, *[(name, args) for name, args in suggested if name == "query_metrics"][:1]]


# Extra calls a scenario's executor makes besides the planner's suggestions.

FAILING_LOOKUP = "zz failing lookup"


def with_failing_and_repeated_calls(suggested):
    """A lookup that fails (top_k out of range; a topic of its own) and the planned lookup twice."""
    knowledge = [(name, args) for name, args in suggested if name == "lookup_knowledge"]
    return [*suggested, ("lookup_knowledge", {"query": FAILING_LOOKUP, "top_k": 10_000}), *knowledge]


class LegacyInvocation:
    """An invocation row as written before evidence refs existed, added to a run while it goes."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.session_id = lab.runs.create_session(client_label="graph-spec-legacy")
        self.invocation_id: int | None = None

    def on_progress(self, event, index: int) -> None:
        if self.invocation_id is not None:
            return
        run_id = run_of_session(self.lab, self.session_id)
        store = self.lab.invocations
        invocation_id = store.begin(run_id, "legacy-call-1", "query_logs", 0,
                                    {"tool": "query_logs", "service": SERVICE})
        store.complete(invocation_id, evidence_status="EVIDENCE_FOUND", agent_result="legacy row", evidence_refs=[])
        with self.lab.sessions() as session:
            session.execute(update(ToolInvocationRow).where(ToolInvocationRow.invocation_id == invocation_id)
                            .values(retrieval_details=None))
            session.commit()
        self.invocation_id = invocation_id

    def answer(self, obs: Observations) -> str:
        deadline = time.monotonic() + 20
        while self.invocation_id is None:  # written from the client's stream, before the tools ran
            assert time.monotonic() < deadline, "HARNESS: the legacy invocation was never written"
            time.sleep(0.05)
        o, r = metric_peak(obs)
        _, log = error_log_ref(obs)
        return contract(
            claim("c1", f"监控显示 {r['text']}", binding(o, r)),
            claim("c2", f"日志显示 {log['text'].removesuffix('…')}", {
                "source_type": "logs", "tool_name": "query_logs", "source_invocation_id": self.invocation_id,
                "source_invocation_ids": [self.invocation_id], "raw_path": log["raw_path"],
                "evidence_excerpt": log["text"].removesuffix("…"),
            }, claim_type="observation"),
        )


def run_of_session(lab: Lab, session_id: str) -> str:
    with lab.sessions() as session:
        return session.scalars(select(RunRow.run_id).where(RunRow.session_id == session_id)).one()


# --- what the scripted verifier answers ----------------------------------------------------------


def lenient_pass(payload: dict[str, Any]) -> str:
    """The embedded verifier's checks, with the verdict a lenient model gives: PASS."""
    data = json.loads(embedded_reply(payload))
    data["verdict"] = "PASS"
    return json.dumps(data, ensure_ascii=False)


def fenced(payload: dict[str, Any]) -> str:
    return "```json\n" + embedded_reply(payload) + "\n```"


def unknown_verification(payload: dict[str, Any]) -> str:
    data = json.loads(embedded_reply(payload))
    for check in data["claim_checks"]:
        check["verification"] = "confirmed"
    return json.dumps(data, ensure_ascii=False)


def not_json(payload: dict[str, Any]) -> str:
    return "I think the verdict is PASS."


# --- the module's diagnoses -----------------------------------------------------------------------


def pass_run(lab: Lab) -> Outcome:
    return lab.once("pass", lambda: lab.diagnose(faithful))


def gap_twice(lab: Lab) -> Outcome:
    return lab.once("gap_twice", lambda: lab.diagnose(fact_and_gap, fact_and_gap))


def gap_then_other(lab: Lab) -> Outcome:
    return lab.once("gap_then_other", lambda: lab.diagnose(fact_and_gap, another_fact))


def contradicted(lab: Lab) -> Outcome:
    return lab.once("contradicted", lambda: lab.diagnose(changed_number, faithful))


def fabricated(lab: Lab) -> Outcome:
    return lab.once("fabricated", lambda: lab.diagnose(fabricated_entity, faithful))


def prose_run(lab: Lab) -> Outcome:
    return lab.once("prose", lambda: lab.diagnose(prose))


def malformed_run(lab: Lab) -> Outcome:
    return lab.once("malformed", lambda: lab.diagnose(malformed))


def foreign_run(lab: Lab) -> Outcome:
    return lab.once("foreign", lambda: lab.diagnose(foreign_invocation))


def low_confid_ceiling(lab: Lab) -> Outcome:
    return lab.once("low_confid_ceiling", lambda: lab.diagnose(fact_and_imprecise, verifier_replies=[lenient_pass]))


def removed_fields(lab: Lab) -> Outcome:
    return lab.once("removed_fields", lambda: lab.diagnose(fact_with_removed_fields))


def malformed_claims(lab: Lab) -> Outcome:
    return lab.once("malformed_claims", lambda: lab.diagnose(fact_and_malformed_claims))


def verifier_fails(lab: Lab) -> Outcome:
    return lab.once("verifier_fails", lambda: lab.diagnose(faithful, verifier_replies=[not_json, fenced]))


def verifier_retried(lab: Lab) -> Outcome:
    return lab.once("verifier_retried", lambda: lab.diagnose(faithful, verifier_replies=[fenced]))


def four_tool_run(lab: Lab) -> Outcome:
    return lab.once("four_tools", lambda: lab.diagnose(four_tools))


def failing_and_repeated(lab: Lab) -> Outcome:
    return lab.once("failing_and_repeated", lambda: lab.diagnose(
        faithful, calls=with_failing_and_repeated_calls, on_progress=lambda event, index: None))


def completed_runs(lab: Lab) -> list[Outcome]:
    return [pass_run(lab), gap_twice(lab), contradicted(lab), fabricated(lab), low_confid_ceiling(lab),
            four_tool_run(lab)]


# --- reading the audit ----------------------------------------------------------------------------

VERIFIER_EVALUATION_KEYS = {"verifier_status", "model_verdict", "effective_verdict", "verdict", "groundedness_score",
                            "rationale", "claim_checks", "facts_checked", "verified_executor_output",
                            "verified_evidence", "gatekeeper_result"}
GATEKEEPER_KEYS = {"status", "severity", "checked_bindings", "rules", "failed_rules", "warnings", "errors"}
LEGACY = {"direct_observation": "direct_evidence", "reasonable_inference": "indirect_support",
          "overstated": "indirect_support", "unsupported": "no_evidence", "external_unknown": "no_evidence",
          "contradicted": "contradicted"}
ROLES = {"planner", "executor", "verifier", "composer"}


def _by_claim_id(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Items by claim id; after an evidence retry the ids are namespaced per round (`r0.c2`), and
    round 0's are also found under their own id (`c2`)."""
    found = {item["claim_id"]: item for item in items}
    for item in items:
        if item["claim_id"].startswith("r0."):
            found.setdefault(item["claim_id"][3:], item)
    return found


def verified_claims(outcome: Outcome) -> dict[str, dict[str, Any]]:
    return _by_claim_id(outcome.evaluation["verified_executor_output"]["claims"])


def checks(outcome: Outcome) -> dict[str, dict[str, Any]]:
    return _by_claim_id(outcome.evaluation["claim_checks"])


def assert_round_0_answers(outcome: Outcome, edge: str) -> None:
    """Round 1 failed before a verdict: round 0's verified result is the answer, the audit says
    so consistently, and the run ends once with one terminal event."""
    assert outcome.response.status == "COMPLETED" and outcome.response.rounds == 2
    assert outcome.effective_verdict == "LOW_CONFID"
    evaluation = outcome.evaluation
    assert evaluation["evidence_retry"]["round_failure"]["edge"] == edge
    assert evaluation["effective_verdict"] == "LOW_CONFID" and evaluation["model_verdict"]
    assert sorted(c["claim_id"] for c in evaluation["claim_checks"]) == ["c1", "c2"], "round 0's claim checks"
    assert len(evaluation["verified_executor_output"]["claims"]) == 2, "round 0's projection"
    assert not outcome.events("fallback"), "no fallback before the answer"
    assert len(outcome.events("composer", "EXIT")) == 1, "one terminal event: the answer"


def planner_modes(outcome: Outcome) -> list[str]:
    return [e["status"] for e in outcome.events("planner", "ENTER")]


def assert_no_verdict(outcome: Outcome) -> None:
    evaluation = outcome.evaluation
    assert not {"model_verdict", "effective_verdict", "verdict"} & evaluation.keys(), evaluation.keys()
    assert outcome.effective_verdict is None and outcome.run["effective_verdict"] is None


def assert_pre_verification_fallback(outcome: Outcome) -> None:
    assert outcome.response.status == "FALLBACK" and outcome.run["status"] == "FALLBACK"
    assert outcome.fallback_type == "PRE_VERIFICATION"
    assert "composer" not in outcome.nodes(), "a fallback is a fixed template, not the composer"
    assert_no_verdict(outcome)


def assert_prompt_audit(evaluation: dict[str, Any]) -> None:
    audit = evaluation["prompt_audit"]
    assert audit["version"]
    assert {p["role"] for p in audit["prompts"]} == ROLES
    assert all(p["name"] and p["version"] for p in audit["prompts"])


def stored_text(outcome: Outcome) -> str:
    return json.dumps(outcome.run["self_evaluation"], ensure_ascii=False)


def trace_summary(lab: Lab, outcome: Outcome):
    """The run's tool_trace_summary, built as the executor builds it, from the stored invocations."""
    return build_tool_trace_summary(lab.invocations.list_for_run(outcome.run["run_id"]))


def tool_call_progress(outcome: Outcome) -> list[dict[str, Any]]:
    from google.protobuf.json_format import MessageToDict

    return [MessageToDict(e.event.details) for e in outcome.stream_events
            if e.HasField("event") and e.event.kind == "tool_call" and e.event.node == "executor"
            and "evidence_level" in MessageToDict(e.event.details)]


# --- the scenarios --------------------------------------------------------------------------------


class TestVerifierShallFactCheckExecutorAnswers:
    def test_pass_verdict_when_all_claims_have_evidence(self, lab):
        outcome = pass_run(lab)
        evaluation = outcome.evaluation
        assert outcome.effective_verdict == "PASS" and evaluation["model_verdict"] == "PASS"
        assert evaluation["verdict_ceiling"] == "PASS"
        assert evaluation["groundedness_score"] >= 0.5
        assert {c["verification"] for c in evaluation["claim_checks"]} == {"direct_observation"}

    def test_low_confid_verdict_with_partial_evidence(self, lab):
        outcome = gap_twice(lab)
        assert outcome.evaluation["model_verdict"] == "LOW_CONFID"
        assert outcome.effective_verdict == "LOW_CONFID"
        verifications = {c["verification"] for c in outcome.evaluation["claim_checks"]}
        assert verifications & {"unsupported", "external_unknown", "overstated"}
        assert "contradicted" not in verifications

    def test_low_confid_verdict_with_only_inference_support(self, lab):
        """A lenient model verifier answers PASS: the deterministic upper bound (PASS needs a
        direct_observation) alone brings the verdict down."""
        outcome = lab.once("risk_only_lenient", lambda: lab.diagnose(risk_only, verifier_replies=[lenient_pass]))
        assert {c["verification"] for c in outcome.evaluation["claim_checks"]} == {"reasonable_inference"}
        assert outcome.evaluation["model_verdict"] == "PASS", "the model was lenient"
        assert outcome.evaluation["verdict_ceiling"] == "PASS", "nor did the gatekeeper cap it"
        assert outcome.evaluation["effective_verdict"] == "LOW_CONFID" == outcome.effective_verdict

    def test_reject_verdict_when_claims_contradict_evidence(self, lab):
        contradiction, fabrication = contradicted(lab), fabricated(lab)
        assert contradiction.evaluation["model_verdict"] == "REJECT" and contradiction.effective_verdict == "REJECT"
        assert "contradicted" in {c["verification"] for c in contradiction.evaluation["claim_checks"]}
        # Fabricated key entity (ruling 2026-11-30): the claim names a dependency its evidence lacks.
        assert fabrication.evaluation["model_verdict"] == "REJECT" and fabrication.effective_verdict == "REJECT"
        assert any(c["fabricated_key"] for c in fabrication.evaluation["claim_checks"])

    def test_verified_structured_claims_are_the_only_verification_target(self, lab):
        outcome = low_confid_ceiling(lab)
        payload = outcome.verifier_payloads[0]
        verified_ids = {c["claim_id"] for c in payload["verified_executor_output"]["claims"]}
        assert verified_ids == {"c1"}, "c2 has no passed binding: it is not a verification target"
        assert set(checks(outcome)) == verified_ids, "one claim check per verified claim, no other"
        evidence = {(e["claim_id"], e["source_invocation_id"], e["tool_name"], e["raw_path"])
                    for e in payload["verified_evidence"]}
        for check in outcome.evaluation["claim_checks"]:
            for ref in check["evidence_refs"]:
                assert any((not ref["raw_path"] or ref["raw_path"] == raw_path)
                           and (not ref["tool_name"] or ref["tool_name"] == tool)
                           and set(ref["source_invocation_ids"]) <= {invocation}
                           for claim_id, invocation, tool, raw_path in evidence if claim_id == check["claim_id"]), ref
        # Raw executor text (the dropped claim's) is not in what the verifier got.
        dropped = json.loads(fact_and_imprecise(outcome.shown[0]))["claims"][1]["claim_text"]
        assert dropped not in outcome.verifier_requests[0]["messages"][-1]["content"]

    def test_verified_structured_claims_are_the_only_verification_target__no_evidence_is_never_direct(self, lab):
        """A claim whose verified evidence the model's ref does not match is not direct_observation."""
        def wrong_ref(payload):
            data = json.loads(embedded_reply(payload))
            for check in data["claim_checks"]:
                check["verification"] = "direct_observation"
                check["evidence_refs"] = [{"tool_name": "query_logs", "source_invocation_ids": [FOREIGN_INVOCATION],
                                           "raw_path": "hits[0]"}]
            return json.dumps(data, ensure_ascii=False)

        outcome = lab.diagnose(faithful, verifier_replies=[wrong_ref, wrong_ref])  # both rounds (a gap retries)
        assert {c["verification"] for c in outcome.evaluation["claim_checks"]} == {"unsupported"}
        assert outcome.effective_verdict != "PASS"

    def test_executor_output_is_invalid(self, lab):
        outcome = prose_run(lab)
        assert_pre_verification_fallback(outcome)
        assert not {"gatekeeper", "verifier"} & set(outcome.nodes())
        assert outcome.verifier_requests == [], "the verifier's model was never called"
        assert outcome.fallback_event()["payload"]["fallback_cause"] == "INVALID_OUTPUT"


class TestVerifierShallOutputStructuredJson:
    def test_claim_level_verifier_output_is_accepted(self, lab):
        evaluation = pass_run(lab).evaluation
        assert {"verdict", "groundedness_score", "critical_fact_count", "claim_checks", "facts_checked",
                "rationale"} <= evaluation.keys()
        assert evaluation["claim_checks"] and len(evaluation["facts_checked"]) == len(evaluation["claim_checks"])

    def test_output_format_validation(self, lab):
        for outcome in completed_runs(lab):
            evaluation = outcome.evaluation
            assert {"verdict", "groundedness_score", "claim_checks", "facts_checked", "rationale"} <= evaluation.keys()
            assert isinstance(evaluation["groundedness_score"], float)
            assert 0.0 <= evaluation["groundedness_score"] <= 1.0
            assert evaluation["model_verdict"] in {"PASS", "LOW_CONFID", "REJECT"}
            assert evaluation["verdict"] in {"PASS", "LOW_CONFID", "REJECT"}

    def test_strict_schema_output(self, lab):
        """A fenced reply is not one JSON object: it is refused (one more attempt, same input)."""
        outcome = verifier_retried(lab)
        assert outcome.evaluation["model_calls"]["verifier"]["attempts"] == 2
        assert outcome.evaluation["verifier_status"] == "COMPLETED"
        evaluation = outcome.evaluation
        assert isinstance(evaluation["critical_fact_count"], int)
        for check in evaluation["claim_checks"]:
            assert {"claim_id", "verification", "detail", "evidence_refs"} <= check.keys()
        for fact in evaluation["facts_checked"]:
            assert {"fact", "is_critical", "verification", "detail"} <= fact.keys()


class TestFactsCheckedShallUseAFixedClassificationSet:
    def test_claim_checks_are_mapped_to_legacy_facts(self, lab):
        seen = set()
        for outcome in completed_runs(lab):
            evaluation = outcome.evaluation
            assert len(evaluation["facts_checked"]) == len(evaluation["claim_checks"])
            for check, fact in zip(evaluation["claim_checks"], evaluation["facts_checked"]):
                assert fact["verification"] == LEGACY[check["verification"]], (check, fact)
                seen.add(check["verification"])
        assert {"direct_observation", "contradicted"} <= seen and seen & {"unsupported", "external_unknown"}


class TestGroundednessScoreShallBeDerivedFromFactClassifications:
    def test_contradicted_fact_forces_reject(self, lab):
        """A lenient model verifier answers PASS: the contradicted critical claim alone forces
        REJECT and a score of 0.0 (shared effective verdict, step 1)."""
        outcome = lab.once("contradicted_lenient",
                           lambda: lab.diagnose(changed_number, faithful, verifier_replies=[lenient_pass]))
        evaluation = outcome.evaluation
        assert "contradicted" in {c["verification"] for c in evaluation["claim_checks"]}
        assert evaluation["model_verdict"] == "PASS", "the model was lenient"
        assert evaluation["effective_verdict"] == "REJECT" == outcome.effective_verdict
        assert evaluation["groundedness_score"] == 0.0

    def test_score_derived_from_supported_facts(self, lab):
        values = {"direct_evidence": 1.0, "indirect_support": 0.6, "no_evidence": 0.0}
        for outcome in (pass_run(lab), gap_twice(lab), low_confid_ceiling(lab)):
            critical = [f for f in outcome.evaluation["facts_checked"] if f["is_critical"]]
            expected = sum(values[f["verification"]] for f in critical) / len(critical)
            assert outcome.evaluation["groundedness_score"] == pytest.approx(min(1.0, max(0.0, expected)))
        # The retry adds to round 0: its direct fact, round 1's and the gap neither round closed.
        assert gap_twice(lab).evaluation["groundedness_score"] == pytest.approx(2 / 3), "2 direct + 1 gap"


class TestChatServiceShallRouteBasedOnVerifierVerdict:
    def test_pass_routes_to_composer(self, lab):
        outcome = pass_run(lab)
        assert outcome.response.status == "COMPLETED" and outcome.response.rounds == 1
        composer = outcome.events("composer", "ENTER")
        assert composer and composer[0]["status"] == "PASS" and "verdict_routes_to_composer" in composer[0]["reason"]
        answer = outcome.response.answer
        assert "answer_version" not in answer and "evidence_bindings" not in answer

    def test_low_confid_does_not_qualify_for_evidence_retry(self, lab):
        # The ceiling is LOW_CONFID: no retry.
        capped = low_confid_ceiling(lab)
        assert capped.effective_verdict == "LOW_CONFID" and capped.response.rounds == 1
        # No valid critical evidence gap (only inference support): no retry.
        inferred = lab.once("risk_only", lambda: lab.diagnose(risk_only))
        assert inferred.effective_verdict == "LOW_CONFID" and inferred.response.rounds == 1
        # The retry count is already one: no third round.
        twice = gap_twice(lab)
        assert twice.effective_verdict == "LOW_CONFID" and twice.response.rounds == 2
        assert planner_modes(twice) == ["NORMAL", "EVIDENCE_GAP_ONLY"]
        for outcome in (capped, inferred, twice):
            assert outcome.events("composer", "ENTER"), "LOW_CONFID routes to the composer"
            sections = outcome.evaluation["composer_output"]["sections"]
            assert {"已确认", "可能方向", "证据缺口"} <= sections.keys(), sections

    def test_low_confid_qualifies_for_evidence_retry(self, lab):
        outcome = gap_then_other(lab)
        assert outcome.response.rounds == 2
        assert planner_modes(outcome) == ["NORMAL", "EVIDENCE_GAP_ONLY"]
        retry = [e for e in outcome.run["events"] if e["status"] == "low_confid_qualifies_for_evidence_retry"]
        assert len(retry) == 1
        round0 = next(e for e in outcome.events("verifier", "EXIT") if e["payload"]["round"] == 0)
        assert round0["payload"]["effective_verdict"] == "LOW_CONFID"
        # Not a groundedness threshold: round 0 scored 0.5 (one direct fact, one gap) and still retried.
        assert re.search(r"groundedness 0\.50\b", round0["reason"]), round0["reason"]
        payloads = outcome.verifier_payloads
        assert "retry_context" not in payloads[0] and payloads[1]["retry_context"]["gaps"]
        assert {inv["round"] for inv in outcome.run["invocations"]} == {0, 1}

    def test_low_confid_qualifies_for_evidence_retry__round_1_supplements_round_0(self, lab):
        """DESIGN §3 (ruling 2026-11-30): the answer keeps round 0's verified claims, adds round
        1's, and a gap round 1 did not close is still named."""
        outcome = gap_then_other(lab)
        round0 = outcome.verifier_payloads[0]["verified_executor_output"]["claims"]
        fact = next(c["claim_text"] for c in round0 if GAP_DETAIL not in c["claim_text"])
        kept = {c["claim_text"] for c in outcome.evaluation["verified_executor_output"]["claims"]}
        assert fact in kept, "round 0's verified fact is kept"
        assert any(GAP_DETAIL in c.get("claim_text", "") and c["verification"] in {"unsupported", "external_unknown"}
                   for c in outcome.evaluation["claim_checks"]), "round 0's open gap is still named"

    def test_low_confid_qualifies_for_evidence_retry__round_1_gatekeeper_reject_keeps_round_0(self, lab):
        outcome = lab.once("retry_gatekeeper_reject", lambda: lab.diagnose(fact_and_gap, foreign_invocation))
        assert_round_0_answers(outcome, "gatekeeper_reject_bypasses_verifier")
        failure = outcome.evaluation["evidence_retry"]["round_failure"]
        assert failure["gatekeeper_result"]["severity"] == "reject", "round 1's failure is recorded beside round 0"

    def test_low_confid_qualifies_for_evidence_retry__round_1_verifier_failure_keeps_round_0(self, lab):
        outcome = lab.once("retry_verifier_fails", lambda: lab.diagnose(
            fact_and_gap, fact_and_gap, verifier_replies=[embedded_reply, not_json, not_json]))
        assert_round_0_answers(outcome, "verifier_execution_fails")
        assert outcome.evaluation["verifier_status"] == "COMPLETED", "round 0's verifier status stands"

    def test_low_confid_qualifies_for_evidence_retry__round_1_downstream_error_keeps_round_0(self, lab):
        outcome = lab.once("retry_verifier_gone", lambda: verifier_gone_in_round_1(lab))
        assert_round_0_answers(outcome, "downstream_failure_is_handled")
        assert "verifier failed" in outcome.evaluation["evidence_retry"]["round_failure"]["reason"]

    def test_low_confid_qualifies_for_evidence_retry__round_1_reject_gives_reject(self, lab):
        outcome = lab.once("retry_reject", lambda: lab.diagnose(fact_and_gap, fabricated_entity))
        assert outcome.response.rounds == 2 and outcome.effective_verdict == "REJECT"
        assert FABRICATED_ENTITY not in outcome.response.answer
        assert len(outcome.events("composer", "EXIT")) == 1 and not outcome.events("fallback")

    def test_low_confid_qualifies_for_evidence_retry__round_1_claims_are_namespaced(self, lab):
        outcome = gap_then_other(lab)
        ids = [c["claim_id"] for c in outcome.evaluation["verified_executor_output"]["claims"]]
        assert ids and all(re.fullmatch(r"r[01]\.c\d+", i) for i in ids), ids
        merge = outcome.evaluation["evidence_retry"]["merge"]
        assert merge["open_gaps"] == ["r0.c2"] and merge["claims"] == ids
        assert [e for e in outcome.run["events"] if e["status"] == "ROUNDS_MERGED"]

    def test_reject_does_not_enter_retry_round(self, lab):
        for outcome in (contradicted(lab), fabricated(lab)):
            assert outcome.effective_verdict == "REJECT" and outcome.response.rounds == 1
            assert planner_modes(outcome) == ["NORMAL"]
            assert not [e for e in outcome.run["events"] if e["status"] == "low_confid_qualifies_for_evidence_retry"]
            composer = outcome.events("composer", "ENTER")
            assert composer and composer[0]["status"] == "REJECT", "REJECT goes to Composer-safe output"

    def test_reject_produces_bounded_output(self, lab):
        contradiction, fabrication = contradicted(lab), fabricated(lab)
        for outcome in (contradiction, fabrication):
            assert outcome.response.status == "COMPLETED" and outcome.effective_verdict == "REJECT"
            assert outcome.evaluation["composer_output"]["template"].startswith("reject")
            assert "answer_version" not in outcome.response.answer
        assert FABRICATED_ENTITY not in fabrication.response.answer, "the fabricated cause is never stated"
        assert "3.5" not in contradiction.response.answer, "the contradicted value is never stated"

    def test_verifier_execution_fails(self, lab):
        outcome = verifier_fails(lab)
        assert len(outcome.verifier_requests) == 2, "two technical attempts"
        assert_pre_verification_fallback(outcome)
        evaluation = outcome.evaluation
        assert evaluation["verifier_status"] == "FAILED"
        assert outcome.fallback_event()["status"] == "verifier_execution_fails"
        exit_event = outcome.events("verifier", "EXIT")[0]
        assert "verdict" not in json.dumps(exit_event["payload"]), "a status is never a verdict"


class TestVerifierShallBeObservable:
    def test_claim_checks_written_to_self_evaluation(self, lab):
        evaluation = pass_run(lab).evaluation
        assert VERIFIER_EVALUATION_KEYS <= evaluation.keys(), VERIFIER_EVALUATION_KEYS - evaluation.keys()
        assert evaluation["verifier_status"] == "COMPLETED"
        assert evaluation["rationale"]

    def test_composer_output_written_to_self_evaluation(self, lab):
        composed = pass_run(lab).evaluation
        assert composed["composer_output"]["template"] and composed["composer_output"]["used_fallback_template"] is False
        assert composed["composer_output"]["answer"]
        # A handled composer fallback: the composer is gone, the fixed template answers.
        outcome = composer_down(lab)
        evaluation = outcome.evaluation
        assert outcome.response.status == "COMPLETED" and outcome.effective_verdict == "PASS"
        assert evaluation["composer_output"]["used_fallback_template"] is True
        assert evaluation["composer_output"]["fallback_reason"]
        assert [e for e in outcome.events("composer") if e["status"] == "COMPOSER_FALLBACK"]
        assert {"claim_checks", "facts_checked", "gatekeeper_result"} <= evaluation.keys(), "the rest is kept"

    def test_verdict_written_to_self_evaluation(self, lab, otlp_receiver):
        for outcome in completed_runs(lab):
            evaluation = outcome.evaluation
            assert evaluation["verdict"] == evaluation["effective_verdict"] == outcome.effective_verdict
            assert outcome.run["effective_verdict"] == outcome.effective_verdict
            assert "rule_evaluation" in outcome.run["self_evaluation"], "the rule channel is kept"
        # The gateway's span of the run carries the same verdicts.
        outcome = pass_run(lab)

        def run_span(spans):
            return next((s for s in spans if s["attributes"].get("attest.run_id") == outcome.run["run_id"]
                         and "attest.effective_verdict" in s["attributes"]), None)

        span = otlp_receiver.wait_for(run_span, timeout=20)
        assert span["attributes"]["attest.effective_verdict"] == "PASS"
        assert span["attributes"]["attest.verdict_ceiling"] == "PASS"

    def test_pre_verification_fallback_is_persisted(self, lab, otlp_receiver):
        for outcome in (prose_run(lab), foreign_run(lab), verifier_fails(lab)):
            assert_pre_verification_fallback(outcome)
            span = otlp_receiver.wait_for(lambda spans, run_id=outcome.run["run_id"]: next(
                (s for s in spans if s["attributes"].get("attest.run_id") == run_id
                 and "attest.fallback_type" in s["attributes"]), None), timeout=20)
            assert span["attributes"]["attest.fallback_type"] == "PRE_VERIFICATION"
            assert "attest.effective_verdict" not in span["attributes"]
            evaluation = outcome.evaluation
            assert evaluation["verifier_status"] and evaluation["failure_reason"]
            assert_prompt_audit(evaluation)
        assert foreign_run(lab).evaluation["gatekeeper_result"]["status"] == "fail"
        assert verifier_fails(lab).evaluation["gatekeeper_result"]["status"] == "pass"

    def test_gatekeeper_result_written_to_self_evaluation(self, lab):
        for outcome in (pass_run(lab), low_confid_ceiling(lab), foreign_run(lab)):
            result = outcome.evaluation["gatekeeper_result"]
            assert GATEKEEPER_KEYS <= result.keys()
        failing = low_confid_ceiling(lab).evaluation["gatekeeper_result"]
        assert failing["status"] == "fail" and failing["severity"] == "low_confid"
        assert "evidence.raw_path" in failing["failed_rules"] and failing["errors"]
        assert {(b["claim_id"], b["outcome"]) for b in failing["checked_bindings"]} == {("c1", "passed"), ("c2", "failed")}

    def test_prompt_audit_written_to_verifier_evaluation(self, lab):
        outcome = pass_run(lab)
        evaluation = outcome.evaluation
        assert_prompt_audit(evaluation)
        prompts = {p["role"]: p for p in evaluation["prompt_audit"]["prompts"]}
        # The roles that called a model name the prompt files they sent (the scripted servers saw them).
        assert prompts["executor"]["name"] != "executor.embedded" and prompts["verifier"]["name"] != "verifier.embedded"
        sent = [outcome.executor_requests[0]["messages"][0]["content"], outcome.verifier_requests[0]["messages"][0]["content"]]
        stored = stored_text(outcome)
        for text in sent:
            assert max(text.splitlines(), key=len) not in stored, "no prompt text is persisted"

    def test_prompt_audit_available_on_fallback_paths(self, lab):
        for outcome in fallback_paths(lab).values():
            assert_prompt_audit(outcome.evaluation)

    def test_prompt_audit_available_on_fallback_paths__names_the_configured_prompts(self, lab):
        configured = {p["role"]: (p["name"], p["version"]) for p in pass_run(lab).evaluation["prompt_audit"]["prompts"]}
        for path, outcome in fallback_paths(lab).items():
            named = {p["role"]: (p["name"], p["version"]) for p in outcome.evaluation["prompt_audit"]["prompts"]}
            assert named == configured, path

    def test_prompt_audit_available_on_fallback_paths__names_the_model_verifier_on_a_gatekeeper_reject(self, lab):
        """A run the gatekeeper ends never reaches the verifier, whose model-backed
        engine still names the prompt file it loads (DescribePrompts), never `verifier.embedded`."""
        outcome = foreign_run(lab)
        assert outcome.evaluation["gatekeeper_result"]["severity"] == "reject"
        assert "verifier" not in outcome.nodes() and not outcome.verifier_requests
        prompts = {p["role"]: (p["name"], p["version"]) for p in outcome.evaluation["prompt_audit"]["prompts"]}
        verifier = load_verifier_prompt(VERIFIER_PROMPT)
        assert prompts["verifier"] == (verifier.name, verifier.version) == ("verifier_v2", verifier.version)
        # The embedded roles of this cluster name their embedded engines.
        assert prompts["planner"] == ("planner.embedded", "1") and prompts["composer"] == ("composer.templates", "1")

    def test_evaluation_payload_is_inspected(self, lab):
        for outcome in (pass_run(lab), removed_fields(lab), low_confid_ceiling(lab)):
            evaluation = outcome.evaluation
            assert "tool_trace_summary" not in stored_text(outcome)
            assert evaluation["executor_structured_output"] == evaluation["verified_executor_output"]
        assert REMOVED_FIELD_MARK not in stored_text(removed_fields(lab)), "raw executor text is never persisted"
        dropped = low_confid_ceiling(lab)
        assert "c2" not in {c["claim_id"] for c in dropped.evaluation["executor_structured_output"]["claims"]}


def composer_down(lab: Lab) -> Outcome:
    def run() -> Outcome:
        composer = lab.running.processes["composer"].process
        composer.send_signal(signal.SIGKILL)
        composer.wait(timeout=10)
        try:
            return lab.diagnose(faithful)
        finally:
            lab.running.restart("composer")

    return lab.once("composer_down", run)


def verifier_gone_in_round_1(lab: Lab) -> Outcome:
    """Round 0 completes; while the executor answers round 1 the verifier process dies, so the
    graph's round-1 verifier call fails as a downstream error."""
    verifier = lab.running.processes["verifier"].process

    def round_1(obs: Observations) -> str:
        verifier.send_signal(signal.SIGKILL)
        verifier.wait(timeout=10)
        return fact_and_gap(obs)

    try:
        return lab.diagnose(fact_and_gap, round_1)
    finally:
        lab.running.restart("verifier")
        _until_the_gateway_reaches_the_verifier(lab)


def _until_the_gateway_reaches_the_verifier(lab: Lab, timeout: float = 30.0) -> None:
    """The gateway's channel to a role it failed to reach reconnects with a backoff: the next
    tests need the verifier again, so wait until a diagnosis reaches it."""
    deadline = time.monotonic() + timeout
    while True:
        if lab.diagnose(faithful).response.status == "COMPLETED":
            return
        if time.monotonic() > deadline:
            raise AssertionError("the gateway did not reach the restarted verifier")
        time.sleep(0.5)


def gatekeeper_down(lab: Lab) -> Outcome:
    def run() -> Outcome:
        gatekeeper = lab.running.processes["gatekeeper"].process
        gatekeeper.send_signal(signal.SIGKILL)
        gatekeeper.wait(timeout=10)
        try:
            return lab.diagnose(faithful)
        finally:
            lab.running.restart("gatekeeper")

    return lab.once("gatekeeper_down", run)


def fallback_paths(lab: Lab) -> dict[str, Outcome]:
    """A handled fallback reached at each role."""
    return {
        "planner": lab.once("no_service", lambda: lab.diagnose(faithful, query="为什么这么慢？")),
        "executor": prose_run(lab),
        "gatekeeper": foreign_run(lab),
        "verifier": verifier_fails(lab),
        "composer": composer_down(lab),
    }


class TestSelfEvaluationShallBeAContainerObject:
    def test_rule_evaluation_stored_separately(self, lab):
        channels = pass_run(lab).run["self_evaluation"]
        assert channels["rule_evaluation"] and "verifier_evaluation" in channels
        assert "claim_checks" not in channels["rule_evaluation"], "each channel under its own key"

    def test_verifier_evaluation_stored_separately(self, lab):
        for outcome in completed_runs(lab):
            channels = outcome.run["self_evaluation"]
            assert channels["verifier_evaluation"]["claim_checks"] and channels["rule_evaluation"]

    def test_no_whole_object_overwrite_after_initialization(self, lab):
        """Another channel written while the run is going survives the graph's own writes."""
        session_id = lab.runs.create_session(client_label="graph-spec-channels")
        written: list[str] = []

        def write_aiops(event, index: int) -> None:
            if written:
                return
            run_id = run_of_session(lab, session_id)  # still RUNNING
            lab.runs.write_channel(run_id, "aiops_rule_evaluation", {"score": 0.42, "source": "graph-spec-test"})
            written.append(run_id)

        outcome = lab.diagnose(faithful, session_id=session_id, on_progress=write_aiops)
        assert written == [outcome.run["run_id"]]
        channels = outcome.run["self_evaluation"]
        assert channels["aiops_rule_evaluation"] == {"score": 0.42, "source": "graph-spec-test"}
        assert channels["rule_evaluation"] and channels["verifier_evaluation"]["verdict"] == "PASS"


class TestVerifierShallConsumeExplicitVerificationInputs:
    def test_explicit_input_blocks_available_to_verifier(self, lab):
        payload = pass_run(lab).verifier_payloads[0]
        assert {"diagnosis_context", "verified_executor_output", "verified_evidence", "gatekeeper_audit",
                "verdict_ceiling"} <= payload.keys()
        assert "retry_context" not in payload, "retry_context only after evidence retry preparation"
        retried = gap_then_other(lab).verifier_payloads
        assert "retry_context" not in retried[0] and retried[1]["retry_context"]

    def test_verifier_remains_isolated_from_intermediate_and_raw_material(self, lab):
        outcome = removed_fields(lab)
        payload = outcome.verifier_payloads[0]
        assert set(payload) <= {"diagnosis_context", "verified_executor_output", "verified_evidence",
                                "gatekeeper_audit", "verdict_ceiling", "retry_context"}
        text = outcome.verifier_requests[0]["messages"][-1]["content"]
        assert REMOVED_FIELD_MARK not in text, "no raw executor text"
        assert "tool_trace_summary" not in text and "output_summary" not in text
        assert "Suggested tool calls" not in text, "no planner material"
        executor_prompt = outcome.executor_requests[0]["messages"][0]["content"]
        assert max(executor_prompt.splitlines(), key=len) not in text, "no prompt text"
        assert len(outcome.verifier_requests[0]["messages"]) == 2, "its own prompt and the payload, no history"

    def test_only_passed_bindings_are_available(self, lab):
        outcome = low_confid_ceiling(lab)
        payload = outcome.verifier_payloads[0]
        passed = {(b["claim_id"], b["binding_index"]) for b in outcome.gatekeeper["checked_bindings"]
                  if b["outcome"] in ("passed", "backfilled")}
        assert passed == {("c1", 0)}
        assert [c["claim_id"] for c in payload["verified_executor_output"]["claims"]] == ["c1"]
        assert {e["claim_id"] for e in payload["verified_evidence"]} == {"c1"}
        c2_excerpt = json.loads(fact_and_imprecise(outcome.shown[0]))["claims"][1]["evidence_bindings"][0]["evidence_excerpt"]
        assert c2_excerpt not in outcome.verifier_requests[0]["messages"][-1]["content"], "no failed material"

    def test_verified_evidence_preserves_precise_references(self, lab):
        outcome = four_tool_run(lab)
        invocations = {inv["invocation_id"]: inv for inv in outcome.run["invocations"]}
        evidence = outcome.verifier_payloads[0]["verified_evidence"]
        assert evidence
        for item in evidence:
            assert {"claim_id", "source_invocation_id", "tool_name", "raw_path", "matched_text"} <= item.keys()
            invocation = invocations[item["source_invocation_id"]]  # of this run
            assert invocation["tool_name"] == item["tool_name"]
            refs = {r["raw_path"]: r["text"] for r in stored_refs(invocation)}
            assert item["raw_path"] in refs and item["matched_text"] in refs[item["raw_path"]]
        passed = {b["claim_id"] for b in outcome.gatekeeper["checked_bindings"] if b["outcome"] == "passed"}
        assert {item["claim_id"] for item in evidence} == passed, "traceable to this run's gatekeeper check"

    def test_gatekeeper_audit_and_ceiling_are_available(self, lab):
        outcome = low_confid_ceiling(lab)
        payload = outcome.verifier_payloads[0]
        assert payload["gatekeeper_audit"]["severity"] == "low_confid" and payload["verdict_ceiling"] == "LOW_CONFID"
        assert outcome.evaluation["model_verdict"] == "PASS", "the (lenient) model said PASS"
        assert outcome.effective_verdict == "LOW_CONFID", "a LOW_CONFID ceiling prevents effective PASS"

    def test_technical_retry_occurs(self, lab):
        outcome = verifier_retried(lab)
        first, second = outcome.verifier_requests
        assert json.dumps(first["messages"], sort_keys=True) == json.dumps(second["messages"], sort_keys=True)
        assert first["messages"][-1]["content"].encode() == second["messages"][-1]["content"].encode()
        assert len(outcome.events("executor", "ENTER")) == 1 and len(outcome.events("gatekeeper", "ENTER")) == 1
        assert len(outcome.executor_requests) == 2, "the executor's model was not asked again"
        called = sum(len(m.get("tool_calls") or []) for m in outcome.executor_requests[-1]["messages"]
                     if m["role"] == "assistant")
        assert len(outcome.run["invocations"]) == called, "no tool ran again"
        assert outcome.effective_verdict == "PASS"


class TestVerifierFactsShallBeAuditable:
    def test_claim_checks_contain_evidence_refs(self, lab):
        for outcome in completed_runs(lab):
            own = {(e["claim_id"], e["source_invocation_id"], e["tool_name"], e["raw_path"])
                   for e in outcome.evaluation["verified_evidence"]}
            for check in outcome.evaluation["claim_checks"]:
                assert isinstance(check["evidence_refs"], list)
                for ref in check["evidence_refs"]:
                    assert any(claim_id == check["claim_id"]
                               and (not ref["tool_name"] or ref["tool_name"] == tool)
                               and (not ref["raw_path"] or ref["raw_path"] == path)
                               and set(ref["source_invocation_ids"]) <= {invocation}
                               for claim_id, invocation, tool, path in own), (ref, own)
        assert any(check["evidence_refs"] for check in pass_run(lab).evaluation["claim_checks"])
        failed = low_confid_ceiling(lab)
        assert all(ref.get("claim_id", "") != "c2" for c in failed.evaluation["claim_checks"] for ref in c["evidence_refs"])

    def test_verifier_evaluation_persists_traceability_snapshot(self, lab):
        outcome = pass_run(lab)
        evaluation = outcome.evaluation
        assert evaluation["traceability_version"]
        used = outcome.verifier_payloads[0]["verified_evidence"]

        def key(item: dict[str, Any]) -> tuple:
            return item["claim_id"], item["source_invocation_id"], item["tool_name"], item["raw_path"]

        assert [key(e) for e in evaluation["verified_evidence"]] == [key(e) for e in used], "the snapshot the verifier used"
        assert all(stored["matched_text"] and used_item["matched_text"].startswith(stored["matched_text"])
                   for stored, used_item in zip(evaluation["verified_evidence"], used)), "bounded, not rewritten"
        assert "tool_trace_summary" not in evaluation


class TestVerifierInputsShallTolerateHardenedNoEvidenceSemantics:
    def test_failed_evidence_remains_a_verifier_visible_gap(self, refused_logs_lab):
        """The logs backend refuses the connection: the failed call is in the payload the model
        verifier received over HTTP, the trace summary keeps it as a gap, and the flow goes on."""
        lab = refused_logs_lab
        outcome = lab.once("refused_logs", lambda: lab.diagnose(faithful, calls=with_metrics))
        failed = [inv for inv in outcome.run["invocations"]
                  if inv["tool_name"] == "query_logs" and inv["evidence_status"] == "ERROR" and inv["round"] == 0]
        assert failed, [(i["tool_name"], i["evidence_status"]) for i in outcome.run["invocations"]]
        failed_id = failed[0]["invocation_id"]
        payload = outcome.verifier_payloads[0]
        seen = [c for c in payload["gatekeeper_audit"].get("failed_calls", []) if c["invocation_id"] == failed_id]
        assert [(c["tool_name"], c["error_class"]) for c in seen] == [("query_logs", "unreachable")], payload
        entry = next(e for e in trace_summary(lab, outcome) if failed_id in e.source_invocation_ids)
        assert entry.success is False and entry.evidence_level == "ERROR", "kept, as a gap"
        assert outcome.events("verifier", "EXIT"), "the verifier flow continued"
        assert outcome.response.status == "COMPLETED" and outcome.effective_verdict != "PASS"

    def test_failed_evidence_remains_a_verifier_visible_gap__a_refused_call_stays_in_the_trace(self, lab):
        """A call the model made with arguments the tool refused is not a backend failure (nothing
        was asked of a backend), but the trace summary and the progress events still keep it."""
        outcome = failing_and_repeated(lab)
        failed = [inv for inv in outcome.run["invocations"] if inv["evidence_status"] == "ERROR"]
        assert [inv["request"].get("query") for inv in failed] == [FAILING_LOOKUP]
        failed_id = failed[0]["invocation_id"]
        entry = next(e for e in trace_summary(lab, outcome) if failed_id in e.source_invocation_ids)
        assert entry.source_invocation_ids == [failed_id]
        assert entry.success is False and entry.evidence_level == "ERROR", "kept, as a gap"
        progress = [p for p in tool_call_progress(outcome) if failed_id in p["invocation_ids"]]
        assert progress and progress[0]["success"] is False and progress[0]["evidence_level"] == "ERROR"
        assert outcome.events("verifier", "EXIT"), "the verifier flow continued"
        assert outcome.response.status == "COMPLETED"

    def test_deduped_retrievals_do_not_count_as_fresh_support(self, lab):
        outcome = failing_and_repeated(lab)
        first, repeated = [inv for inv in outcome.run["invocations"] if inv["tool_name"] == "lookup_knowledge"
                           and inv["evidence_status"] != "ERROR"]
        assert not first["retrieval_details"]["deduped"] and repeated["retrieval_details"]["deduped"] is True
        shown = next(o for o in outcome.shown[0].items if o.get("invocation_id") == repeated["invocation_id"])
        assert shown.get("deduped") is True, "the agent is told it is no new evidence"
        alone = build_tool_trace_summary(lab.invocations.get_many([repeated["invocation_id"]]))
        assert [(e.success, e.evidence_level) for e in alone] == [(False, "NO_NEW_EVIDENCE")]
        group = next(e for e in trace_summary(lab, outcome) if repeated["invocation_id"] in e.source_invocation_ids)
        assert f"#{first['invocation_id']}" in group.output_summary
        assert f"#{repeated['invocation_id']}:" not in group.output_summary, "not listed as a hit of its own"


class TestVerifierEvidenceSummariesShallPreserveConcreteSupportingFacts:
    def test_log_evidence_contains_a_concrete_matching_message(self, lab):
        outcome = four_tool_run(lab)
        cited = json.loads(four_tools(outcome.shown[0]))["claims"][1]["evidence_bindings"][0]
        message = cited["evidence_excerpt"].split(" - ", 1)[-1][:60]
        entry = next(e for e in trace_summary(lab, outcome) if cited["source_invocation_id"] in e.source_invocation_ids)
        assert message.split(" traceId")[0][:40] in entry.output_summary, entry.output_summary
        check = checks(outcome)["c2"]
        assert check["verification"] == "direct_observation", check
        assert any(cited["source_invocation_id"] in ref["source_invocation_ids"] for ref in check["evidence_refs"])

    def test_metrics_evidence_contains_concrete_alert_fields(self, lab):
        outcome = pass_run(lab)
        peak = verified_claims(outcome)["c1"]["evidence_bindings"][0]
        entry = next(e for e in trace_summary(lab, outcome) if peak["source_invocation_id"] in e.source_invocation_ids)
        assert SERVICE in entry.output_summary
        metric = re.search(r"(\w+)=[\d.]+", peak["evidence_excerpt"]).group(1)
        assert metric in entry.output_summary and re.search(r"\d", entry.output_summary)
        stored = " ".join(r["text"] for inv in outcome.run["invocations"] if inv["invocation_id"] == peak["source_invocation_id"]
                          for r in stored_refs(inv))
        for name in re.findall(r"[a-z_]+_(?:percent|total|seconds|bytes|ratio)\b", entry.output_summary):
            assert name in stored, f"{name} is in the summary but not in the tool output"

    def test_summary_remains_bounded(self, lab):
        outcome = four_tool_run(lab)
        entries = trace_summary(lab, outcome)
        sizes = {e.tool_name: len(e.output_summary.encode()) for e in entries}
        assert all(size <= MAX_ENTRY_OUTPUT_BYTES for size in sizes.values()), sizes
        assert sum(len(e.output_summary.encode()) + len(e.input_summary.encode()) for e in entries) <= MAX_TOTAL_BYTES
        logs = next(inv for inv in outcome.run["invocations"] if inv["tool_name"] == "query_logs")
        raw = sum(len(r["text"].encode()) for r in stored_refs(logs))
        assert raw > sizes["query_logs"], "the logs output was large enough to need the bound"
        entry = next(e for e in entries if e.tool_name == "query_logs")
        assert re.search(r"ERROR|WARN", entry.output_summary[:300]), "concrete facts come first"


class TestVerifierLowConfidenceOutputShallNotPresentUnsupportedClaimsAsConfirmed:
    def test_low_confid_with_critical_evidence_gaps(self, lab):
        outcome = gap_twice(lab)
        assert outcome.effective_verdict == "LOW_CONFID"
        gaps = [c for c in outcome.evaluation["claim_checks"] if c["verification"] in ("unsupported", "external_unknown")]
        assert gaps and any(f["verification"] == "no_evidence" for f in outcome.evaluation["facts_checked"])
        sections = outcome.evaluation["composer_output"]["sections"]
        assert sections.get("证据缺口", 0) >= len(gaps), "the gaps are named"
        assert sections.get("已确认", 0) == sum(1 for c in outcome.evaluation["claim_checks"]
                                               if c["verification"] == "direct_observation")
        assert GAP_DETAIL not in outcome.response.answer.split("【证据缺口】")[0], "never stated as confirmed"


class TestExecutorShallOutputAnEvidenceAttributionContract:
    def test_executor_v2_final_output_contains_only_structured_diagnostic_fields(self, lab):
        valid = pass_run(lab)
        assert valid.evaluation["executor_output_parse_status"] == "valid"
        stored = valid.evaluation["verified_executor_output"]
        assert stored["answer_version"] == "executor_evidence_v2"
        assert {"claims", "hypotheses", "recommended_actions", "missing_info"} <= stored.keys()
        assert not {"diagnosis_summary", "user_facing_answer"} & stored.keys()
        # An output without one of the lists, or with a removed field, is not a clean contract.
        lacking = lab.once("without_missing_info", lambda: lab.diagnose(fact_without_missing_info))
        for outcome in (lacking, removed_fields(lab)):
            assert "schema.executor_v2" in outcome.gatekeeper["failed_rules"]
            assert outcome.effective_verdict != "PASS"

    def test_confirmed_claims_carry_evidence_bindings(self, lab):
        for c in verified_claims(pass_run(lab)).values():
            assert {"claim_id", "claim_type", "claim_text", "support_level", "evidence_bindings"} <= c.keys()
            assert c["support_level"] in ("direct", "indirect") and c["evidence_bindings"]
        outcome = malformed_claims(lab)
        assert set(verified_claims(outcome)) == {"c1"}, "no bindings / unknown support_level: not confirmed"
        assert "schema.executor_v2" in outcome.gatekeeper["failed_rules"]

    def test_evidence_bindings_support_multiple_tool_types(self, lab):
        outcome = four_tool_run(lab)
        assert outcome.gatekeeper["status"] in ("pass", "warn"), outcome.gatekeeper["errors"]
        bindings = [b for c in verified_claims(outcome).values() for b in c["evidence_bindings"]]
        tools = {b["tool_name"] for b in bindings}
        assert {"query_metrics", "query_logs", "lookup_knowledge"} <= tools
        for b in bindings:
            assert b["source_type"] and b["source_invocation_ids"] and b["evidence_excerpt"]
            assert b["source_type"] == {"query_metrics": "metrics", "query_logs": "logs", "query_changes": "changes",
                                        "lookup_knowledge": "knowledge"}[b["tool_name"]]

    def test_unsupported_conclusions_are_not_confirmed_claims(self, lab):
        outcome = lab.once("unlinked_cause", lambda: lab.diagnose(unlinked_root_cause, unlinked_root_cause))
        cause = checks(outcome)["c2"]
        assert cause["verification"] not in ("direct_observation", "reasonable_inference"), cause
        assert outcome.effective_verdict != "PASS"
        prompt = outcome.executor_requests[0]["messages"][0]["content"]
        assert "`hypotheses`" in prompt and "never in `claims`" in prompt, "the executor is told where causes go"

    def test_runbook_and_skill_guidance_do_not_become_incident_facts(self, lab):
        outcome = lab.once("runbook_fact", lambda: lab.diagnose(runbook_as_incident_fact, runbook_as_incident_fact))
        guidance = checks(outcome)["c2"]
        assert guidance["verification"] not in ("direct_observation", "reasonable_inference"), guidance
        assert outcome.effective_verdict != "PASS"


class TestUserFacingChatAnswersShallRemainReadableChinese:
    def test_v2_machine_contract_is_not_exposed_as_normal_user_answer(self, lab):
        outcome = pass_run(lab)
        answer = outcome.response.answer
        with pytest.raises(ValueError):
            json.loads(answer)
        assert re.search(r"[\u4e00-\u9fff]", answer)
        assert not {"answer_version", "evidence_bindings", "claim_id"} & set(re.findall(r"[a-z_]+", answer))

    def test_machine_contract_remains_available_for_trace_inspection(self, lab):
        outcome = pass_run(lab)
        contract_ = outcome.evaluation["verified_executor_output"]
        assert contract_["answer_version"] == "executor_evidence_v2" and contract_["claims"]
        assert outcome.run["answer"] == outcome.response.answer and "answer_version" not in outcome.run["answer"]


class TestStructuredExecutorOutputShallDegradeSafely:
    def test_malformed_executor_json_is_classified(self, lab):
        for outcome, status in ((malformed_run(lab), "malformed"), (prose_run(lab), "missing")):
            assert outcome.evaluation["executor_output_parse_status"] == status
            assert outcome.fallback_event()["payload"]["fallback_cause"] == "INVALID_OUTPUT"
            assert_pre_verification_fallback(outcome)
            assert not {"gatekeeper", "verifier", "composer"} & set(outcome.nodes())

    def test_structured_parse_failure_remains_observable(self, lab):
        outcome = malformed_run(lab)
        exit_event = outcome.events("executor", "EXIT")[0]
        assert exit_event["status"] == "malformed"
        assert outcome.fallback_event()["status"] == "executor_output_is_invalid"
        evaluation = outcome.evaluation
        assert "INVALID_OUTPUT" in evaluation["failure_reason"] and evaluation["verifier_status"] == "SKIPPED"
        assert evaluation["rejection_ledger"][0]["rule"] == "parse_status:malformed"
        assert "verified_executor_output" not in evaluation and "gatekeeper_result" not in evaluation
        assert_no_verdict(outcome)


def check_with_gatekeeper(lab: Lab, run_id: str, output: str) -> tuple[GatekeeperResult, str | None, int]:
    """The cluster's gatekeeper process on one output for a run of the store: its result, the
    verdict ceiling and how many verified evidence items it let through."""
    with lab.running.channel("gatekeeper") as channel:
        response = gatekeeper_pb2_grpc.GatekeeperServiceStub(channel).CheckEvidence(
            gatekeeper_pb2.CheckEvidenceRequest(run_id=run_id, executor_output_text=output), timeout=10)
    return (message_to_model(response.gatekeeper_result, GatekeeperResult),
            spec_value(enums_pb2.Verdict.DESCRIPTOR, response.verdict_ceiling), len(response.verified_evidence))


def miscited(lab: Lab, **changes: Any):
    """The pass run's output with its one binding changed, as its executor's model could write it.
    The executor's own citation self-check repairs or drops such a binding before the gatekeeper
    sees it; the gatekeeper is therefore asked directly, over the run's real invocations."""
    outcome = pass_run(lab)
    o, r = metric_peak(outcome.shown[0])
    output = contract(claim("c1", f"监控显示 {r['text']}", binding(o, r, **changes)))
    return check_with_gatekeeper(lab, outcome.run["run_id"], output)


class TestExecutorGatekeeperShallValidateDeterministicStructuredOutputFailures:
    def test_schema_rule_rejects_removed_fields(self, lab):
        outcome = removed_fields(lab)
        assert outcome.gatekeeper["status"] == "fail"
        assert "schema.executor_v2" in outcome.gatekeeper["failed_rules"]
        assert REMOVED_FIELD_MARK not in outcome.response.answer

    def test_schema_rule_rejects_missing_evidence_bindings(self, lab):
        outcome = malformed_claims(lab)
        assert outcome.gatekeeper["status"] == "fail"
        assert "schema.executor_v2" in outcome.gatekeeper["failed_rules"]
        assert "c2" not in verified_claims(outcome)

    def test_invocation_rule_rejects_fabricated_invocation_ids(self, lab):
        outcome = foreign_run(lab)
        assert outcome.gatekeeper["status"] == "fail"
        assert "evidence.invocation_ref" in outcome.gatekeeper["failed_rules"]
        assert outcome.verdict_ceiling == "REJECT"

    def test_invocation_rule_rejects_tool_name_mismatch(self, lab):
        result, ceiling, verified = miscited(lab, tool_name="query_logs", source_type="logs")
        assert result.status == "fail" and ceiling == "REJECT" and verified == 0
        assert "evidence.invocation_ref" in result.failed_rules

    def test_valid_structured_output_passes_initial_gatekeeper_rules(self, lab):
        result = pass_run(lab).gatekeeper
        assert result["status"] == "pass" and result["failed_rules"] == []

    def test_gatekeeper_reject_bypasses_verifier(self, lab):
        outcome = foreign_run(lab)
        assert_pre_verification_fallback(outcome)
        assert "verifier" not in outcome.nodes() and outcome.verifier_requests == []
        assert outcome.fallback_event()["status"] == "gatekeeper_reject_bypasses_verifier"

    def test_gatekeeper_low_confidence_is_bounded(self, lab):
        outcome = low_confid_ceiling(lab)
        assert outcome.verdict_ceiling == "LOW_CONFID"
        payload = outcome.verifier_payloads[0]
        assert [c["claim_id"] for c in payload["verified_executor_output"]["claims"]] == ["c1"]
        assert all(len(c["evidence_bindings"]) == 1 for c in payload["verified_executor_output"]["claims"])
        assert outcome.effective_verdict == "LOW_CONFID"


class TestVerifierClaimChecksShallUseAFixedDerivabilityClassificationSet:
    def test_claim_check_verification_values_are_constrained(self, lab):
        for outcome in completed_runs(lab):
            assert {c["verification"] for c in outcome.evaluation["claim_checks"]} <= set(VERIFICATIONS)
        # A value outside the set is a protocol error: one more attempt, and it is never stored.
        outcome = lab.once("unknown_verification", lambda: lab.diagnose(faithful, verifier_replies=[unknown_verification]))
        assert outcome.evaluation["model_calls"]["verifier"]["attempts"] == 2
        assert "confirmed" not in {c["verification"] for c in outcome.evaluation["claim_checks"]}

    def test_claim_check_evidence_references_remain_auditable(self, lab):
        for outcome in completed_runs(lab):
            for check in outcome.evaluation["claim_checks"]:
                assert {"claim_id", "verification", "detail", "evidence_refs"} <= check.keys()
                for ref in check["evidence_refs"]:
                    assert {"trace_ref", "tool_name", "source_invocation_ids"} <= ref.keys()
        refs = [r for c in pass_run(lab).evaluation["claim_checks"] for r in c["evidence_refs"]]
        assert refs and all(r["tool_name"] and r["source_invocation_ids"] for r in refs)


class TestUserFacingVerifierOutputsShallFollowComposerSafeProtocols:
    def test_pass_uses_composer_safe_output(self, lab):
        outcome = pass_run(lab)
        composer = outcome.evaluation["composer_output"]
        assert composer["template"].startswith("pass") and composer["sections"]
        assert outcome.response.answer and "answer_version" not in outcome.response.answer

    def test_low_confid_uses_composer_safe_uncertainty_output(self, lab):
        outcome = gap_twice(lab)
        composer = outcome.evaluation["composer_output"]
        assert composer["template"].startswith("low_confid")
        assert {"已确认", "可能方向", "证据缺口"} <= composer["sections"].keys()
        gaps = [c for c in outcome.evaluation["claim_checks"] if c["verification"] not in ("direct_observation",
                                                                                        "reasonable_inference")]
        assert composer["sections"]["证据缺口"] == len(gaps), "gaps come only from the verifier"

    def test_reject_uses_degraded_template(self, lab):
        for outcome in (contradicted(lab), fabricated(lab)):
            composer = outcome.evaluation["composer_output"]
            assert composer["template"].startswith("reject")
            assert {"已确认", "证据缺口"} <= composer["sections"].keys()
            assert "可能方向" not in composer["sections"], "no possible cause is offered"
        assert FABRICATED_ENTITY not in fabricated(lab).response.answer


class TestExecutorEvidenceBindingsShallSupportPreciseEvidenceReferences:
    def test_precise_evidence_binding_contains_invocation_path_and_excerpt(self, lab):
        outcome = pass_run(lab)
        invocations = {inv["invocation_id"]: inv for inv in outcome.run["invocations"]}
        for b in (b for c in verified_claims(outcome).values() for b in c["evidence_bindings"]):
            assert b["source_invocation_id"] and b["raw_path"] and b["tool_name"] and b["evidence_excerpt"]
            refs = stored_refs(invocations[b["source_invocation_id"]])  # relative to the view
            assert b["raw_path"] in {r["raw_path"] for r in refs}

    def test_legacy_plural_invocation_ids_remain_compatibility_only(self, lab):
        outcome = low_confid_ceiling(lab)  # c2 cites by source_invocation_ids only, without raw_path
        c2 = [b for b in outcome.gatekeeper["checked_bindings"] if b["claim_id"] == "c2"]
        assert c2 and c2[0]["outcome"] == "failed" and c2[0]["rule"] == "evidence.raw_path"
        assert outcome.verdict_ceiling == "LOW_CONFID" and outcome.effective_verdict != "PASS"


class TestGatekeeperShallValidateEvidenceReferenceFidelity:
    def test_valid_precise_binding_passes(self, lab):
        result = pass_run(lab).gatekeeper
        assert (result["status"], result["severity"]) == ("pass", "none")
        assert [b["outcome"] for b in result["checked_bindings"]] == ["passed"]

    def test_missing_raw_path_is_low_confidence(self, lab):
        outcome = low_confid_ceiling(lab)
        assert (outcome.gatekeeper["status"], outcome.gatekeeper["severity"]) == ("fail", "low_confid")
        assert outcome.effective_verdict != "PASS"

    def test_old_invocation_without_evidence_refs_is_low_confidence(self, lab):
        legacy = LegacyInvocation(lab)
        outcome = lab.diagnose(legacy.answer, session_id=legacy.session_id, on_progress=legacy.on_progress)
        c2 = [b for b in outcome.gatekeeper["checked_bindings"] if b["claim_id"] == "c2"]
        assert c2 and c2[0]["rule"] == "evidence.raw_path" and c2[0]["severity"] == "low_confid", c2
        assert (outcome.gatekeeper["status"], outcome.gatekeeper["severity"]) == ("fail", "low_confid")
        assert outcome.effective_verdict != "PASS"

    def test_unknown_raw_path_is_rejected(self, lab):
        result, ceiling, verified = miscited(lab, raw_path="series[0].points[9999]")
        assert verified == 0 and (result.status, result.severity, ceiling) == ("fail", "reject", "REJECT")
        assert "evidence.raw_path" in result.failed_rules

    def test_mismatched_excerpt_is_rejected(self, lab):
        _, r = metric_peak(pass_run(lab).shown[0])
        result, ceiling, verified = miscited(lab, evidence_excerpt=r["text"].replace(_value(r), "3.5"))
        assert verified == 0 and (result.status, result.severity, ceiling) == ("fail", "reject", "REJECT")
        assert "evidence.excerpt_mismatch" in result.failed_rules


class TestVerifierShallUseVerifiedClaimLocalEvidenceForDerivability:
    def test_verified_excerpt_supports_direct_observation(self, lab):
        outcome = pass_run(lab)
        assert outcome.verdict_ceiling == "PASS"
        c1 = verified_claims(outcome)["c1"]
        matched = [e["matched_text"] for e in outcome.evaluation["verified_evidence"] if e["claim_id"] == "c1"]
        assert any(c1["claim_text"].removeprefix("监控显示 ") in text for text in matched)
        assert checks(outcome)["c1"]["verification"] == "direct_observation"

    def test_verified_evidence_is_complete_verifier_context(self, lab):
        outcome = four_tool_run(lab)
        text = outcome.verifier_requests[0]["messages"][-1]["content"]
        assert "tool_trace_summary" not in text
        cited = {(e["source_invocation_id"], e["raw_path"]) for e in outcome.verifier_payloads[0]["verified_evidence"]}
        uncited = [r["text"] for inv in outcome.run["invocations"] for r in stored_refs(inv)
                   if (inv["invocation_id"], r["raw_path"]) not in cited and len(r["text"]) > 30]
        assert uncited and not [t for t in uncited if t in text], "no unreferenced tool material"


class TestGatekeeperSeverityShallConstrainEffectiveVerdict:
    def test_reject_severity_bypasses_verifier(self, lab):
        outcome = foreign_run(lab)
        assert outcome.gatekeeper["severity"] == "reject"
        assert "verifier" not in outcome.nodes() and outcome.verifier_requests == []
        assert_no_verdict(outcome)

    def test_low_confidence_severity_prevents_pass(self, lab):
        outcome = low_confid_ceiling(lab)
        assert outcome.gatekeeper["severity"] == "low_confid"
        assert outcome.evaluation["model_verdict"] == "PASS"
        assert outcome.evaluation["effective_verdict"] == "LOW_CONFID" == outcome.effective_verdict

    def test_gatekeeper_audit_includes_severity(self, lab):
        for outcome in (pass_run(lab), low_confid_ceiling(lab), foreign_run(lab), removed_fields(lab)):
            result = outcome.gatekeeper
            assert {"status", "severity", "checked_bindings", "failed_rules", "warnings", "errors"} <= result.keys()
            assert result["severity"] in ("none", "low_confid", "reject")


class TestVerifierInputHookShallOnlyPerformNarrowCompatibilityBackfill:
    def test_unique_invocation_candidate_may_be_backfilled(self, lab):
        outcome = lab.once("backfill", lambda: lab.diagnose(backfill_candidate))
        binding_ = outcome.gatekeeper["checked_bindings"][0]
        assert binding_["outcome"] == "backfilled", outcome.gatekeeper
        assert any("backfill" in w for w in outcome.gatekeeper["warnings"])
        metrics = [inv["invocation_id"] for inv in outcome.run["invocations"] if inv["tool_name"] == "query_metrics"]
        assert [e["source_invocation_id"] for e in outcome.evaluation["verified_evidence"]] == metrics

    @pytest.mark.parametrize("spelling", list(NO_ID_SPELLINGS))
    def test_unique_invocation_candidate_may_be_backfilled__however_no_id_is_spelled(self, lab, spelling):
        """One candidate: the spec's warning-level fill, whatever the spelling (status warn,
        severity none, ceiling PASS, no failed rule)."""
        outcome = lab.once(f"backfill {spelling}", lambda: lab.diagnose(backfill_spelled(spelling)))
        result = outcome.gatekeeper
        assert (result["status"], result["severity"], outcome.verdict_ceiling) == ("warn", "none", "PASS"), result
        assert result["failed_rules"] == [] and result["errors"] == []
        assert [b["outcome"] for b in result["checked_bindings"]] == ["backfilled"]
        assert any("backfilled" in w for w in result["warnings"])
        assert outcome.verifier_payloads, "the backfilled claim went on to the verifier"

    @pytest.mark.parametrize("spelling", ["absent", "empty list"])
    def test_unique_invocation_candidate_may_be_backfilled__not_with_two_candidates(self, lab, spelling):
        outcome = lab.once(f"no backfill {spelling}",
                           lambda: lab.diagnose(backfill_spelled(spelling), calls=metrics_twice))
        assert len([i for i in outcome.run["invocations"] if i["tool_name"] == "query_metrics"]) == 2
        result = outcome.gatekeeper
        assert result["failed_rules"] == ["evidence.invocation_ref"], result
        assert (result["status"], result["severity"]) == ("fail", "low_confid")
        assert [(b["outcome"], b["rule"]) for b in result["checked_bindings"]] == [("failed", "evidence.invocation_ref")]

    def test_raw_path_is_never_backfilled(self, lab):
        outcome = low_confid_ceiling(lab)
        assert all(e["claim_id"] != "c2" for e in outcome.evaluation["verified_evidence"])
        c2 = next(b for b in outcome.gatekeeper["checked_bindings"] if b["claim_id"] == "c2")
        assert c2["rule"] == "evidence.raw_path" and c2["outcome"] == "failed"


class TestExecutorPromptShallConstrainNarrowScopeOverExpansion:
    def test_narrow_scope_produces_minimal_observation_claims(self, lab):
        outcome = lab.once("narrow", lambda: lab.diagnose(faithful, query=f"{SERVICE} 的 CPU 告警还在吗？"))
        prompt = outcome.executor_requests[0]["messages"][0]["content"]
        assert re.search(r"narrow", prompt, re.IGNORECASE) and "at most two" in prompt
        assert "`observation`" in prompt and "`negative_observation`" in prompt
        assert len(verified_claims(outcome)) == 1 and outcome.response.status == "COMPLETED"


class TestGatekeeperShallExposeRuleCatalogMetadataInAuditOutput:
    def test_gatekeeper_pass_includes_rule_metadata(self, lab):
        result = pass_run(lab).gatekeeper
        assert result["status"] == "pass" and result["rule_set_version"] and result["rules"]

    def test_gatekeeper_fail_includes_rule_metadata(self, lab):
        for outcome in (foreign_run(lab), low_confid_ceiling(lab)):
            result = outcome.gatekeeper
            assert result["status"] == "fail" and result["rule_set_version"] and result["rules"]

    def test_gatekeeper_fallback_pass_includes_rule_metadata(self, lab):
        """There is no fallback pass here: with the gatekeeper gone the graph fails closed (DESIGN
        §1), so no gatekeeper result, and no verdict, is invented."""
        outcome = gatekeeper_down(lab)
        assert_pre_verification_fallback(outcome)
        assert outcome.fallback_event()["payload"]["fallback_cause"] == "TECHNICAL_FAILURE"
        assert "gatekeeper_result" not in outcome.evaluation and outcome.verifier_requests == []


class TestGatekeeperRuleCatalogShallRemainDeterministic:
    def test_rule_metadata_is_lightweight(self, lab):
        rules = pass_run(lab).gatekeeper["rules"]
        assert {r["id"] for r in rules} >= {"schema.executor_v2", "evidence.invocation_ref", "evidence.raw_path",
                                            "evidence.excerpt_mismatch"}
        for rule in rules:
            assert {"id", "description", "enabled"} <= rule.keys() and ("default_severity" in rule or rule.get("parameters"))
            assert all(isinstance(v, (int, float, str, bool)) for v in rule.get("parameters", {}).values())
        # Metadata only: no rule carries code to run.
        assert not {"script", "code", "expression", "callable"} & {key for rule in rules for key in rule}
